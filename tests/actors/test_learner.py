"""actors.learner.Learner as a plain class (no Ray): a GRPO step lowers the loss, micro-batching gives the same
gradient as one batch, masked tokens add nothing, save/load resumes exactly, SFT lowers cross-entropy.
CPU, a tiny Qwen3 built here; one test runs on CUDA when there is a GPU."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch

from actors.learner import Learner
from orchestra.policy.grpo import collate, grpo_loss, token_logprobs
from orchestra.types import TrainSample

PAD = 0


@pytest.fixture(scope="module")
def base_model():
    return tiny_qwen3()


def tiny_qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                      pad_token_id=PAD, attn_implementation="sdpa")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Qwen3ForCausalLM(cfg).eval()


def make_samples(seed: int, n: int = 8, masked_tools: bool = True) -> list[TrainSample]:
    """Random prompts/responses of varied lengths, +/- advantages, some tool tokens (mask 0) mid-response."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = [rng.randrange(1, 300) for _ in range(rng.randint(3, 12))]
        r = [rng.randrange(1, 300) for _ in range(rng.randint(2, 10))]
        m = [1] * len(r)
        if masked_tools and len(r) > 4 and i % 2:
            m[2:4] = [0, 0]
        lp = [-rng.uniform(4, 7) if k else 0.0 for k in m]
        out.append(TrainSample(p, r, m, lp, advantage=rng.choice([-1.5, -0.5, 0.7, 1.2]), turn=i % 2))
    return out


def learner(model, **kw) -> Learner:
    args = dict(pad_token_id=PAD, lr=1e-3, kl_coef=1e-2, micro_batch_size=32, grad_clip=0.0)
    args.update(kw)
    return Learner(copy.deepcopy(model), **args)


def grads(lrn: Learner) -> list[torch.Tensor]:
    return [p.grad.clone() for p in lrn.params]


def test_one_update_lowers_the_loss_on_a_fixed_batch(base_model):
    lrn = learner(base_model, kl_coef=0.0)
    samples = make_samples(0)
    batch = collate(samples, PAD)
    with torch.no_grad():
        old = token_logprobs(lrn.model, batch, 1.0)
    mask, adv = batch["response_mask"], batch["advantages"]
    before, _ = grpo_loss(old, old, None, adv, mask, kl_coef=0.0)
    m = lrn.update(samples)
    with torch.no_grad():
        new = token_logprobs(lrn.model, batch, 1.0)
    after, _ = grpo_loss(new, old, None, adv, mask, kl_coef=0.0)
    assert after.item() < before.item() - 1e-3
    assert m["loss"] == pytest.approx(before.item(), abs=1e-5)  # ratio 1 at the first step
    assert m["clipfrac"] == 0.0 and m["version"] == 1.0 and lrn.version == 1
    assert m["tokens"] == mask.sum().item() and m["grad_norm"] > 0 and m["entropy"] > 0
    want_diff = ((old - batch["rollout_logprobs"]).abs() * mask).sum() / mask.sum()
    assert m["rollout_logprob_diff"] == pytest.approx(want_diff.item(), rel=1e-4)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batching_gives_the_one_batch_gradient(base_model, mode):
    samples = make_samples(1, n=7)
    one = learner(base_model, micro_batch_size=32, loss_agg_mode=mode)
    many = learner(base_model, micro_batch_size=3, loss_agg_mode=mode)
    m1, m3 = one.update(samples), many.update(samples)
    for a, b in zip(grads(one), grads(many), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    for k in ("loss", "pg_loss", "kl", "entropy", "rollout_logprob_diff"):
        assert m1[k] == pytest.approx(m3[k], rel=1e-4, abs=1e-7), k
    assert m1["kl"] == 0.0  # reference == policy before the first step


def test_fused_old_logprobs_equal_a_separate_recompute(base_model):
    samples = make_samples(2)
    fused, separate = learner(base_model), learner(base_model, fuse_old_logprobs=False)
    fused.update(samples)
    separate.update(samples)
    for a, b in zip(grads(fused), grads(separate), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_masked_tokens_and_fully_masked_samples_add_no_gradient(base_model):
    samples = make_samples(3, n=4)
    dead = TrainSample([5, 6, 7], [8, 9, 10], [0, 0, 0], [0.0] * 3, advantage=3.0)
    a, b = learner(base_model), learner(base_model)
    a.update(samples)
    b.update(samples + [dead])
    for ga, gb in zip(grads(a), grads(b), strict=True):
        torch.testing.assert_close(ga, gb, atol=1e-6, rtol=1e-5)
    # The rollout logprobs of mask-0 tokens feed only the mismatch metric, never the loss.
    c = learner(base_model)
    noisy = [TrainSample(s.prompt_ids, s.response_ids, s.response_mask,
                         [x if k else 99.0 for x, k in zip(s.logprobs, s.response_mask, strict=True)], s.advantage)
             for s in samples]
    mc = c.update(noisy)
    for ga, gc in zip(grads(a), grads(c), strict=True):
        torch.testing.assert_close(ga, gc, atol=1e-6, rtol=1e-5)
    assert mc["tokens"] == sum(sum(s.response_mask) for s in samples)
    only_dead = learner(base_model).update([dead])
    assert only_dead["skipped"] == 1.0 and only_dead["version"] == 0.0


def test_save_load_resumes_exactly(base_model, tmp_path):
    b1, b2 = make_samples(4), make_samples(5)
    a = learner(base_model, ppo_epochs=2)
    a.update(b1)
    a.save(tmp_path)
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "config.json").is_file()
    rand_a = (random.random(), float(np.random.rand()), torch.rand(3))
    ma = a.update(b2)

    from transformers import Qwen3ForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)  # different initial weights: everything must come from the checkpoint
        other = Qwen3ForCausalLM(base_model.config).eval()
    b = Learner(other, pad_token_id=PAD, lr=1e-3, kl_coef=1e-2, grad_clip=0.0, ppo_epochs=2, seed=7)
    b.load(tmp_path)
    assert b.version == 1
    rand_b = (random.random(), float(np.random.rand()), torch.rand(3))
    assert rand_a[:2] == rand_b[:2] and torch.equal(rand_a[2], rand_b[2])
    mb = b.update(b2)
    assert mb["loss"] == ma["loss"] and mb["kl"] == ma["kl"] and mb["version"] == 2.0
    for (ka, va), (kb, vb) in zip(a.model.state_dict().items(), b.model.state_dict().items(), strict=True):
        assert ka == kb and torch.equal(va, vb), ka
    sa, sb = a.optimizer.state_dict()["state"], b.optimizer.state_dict()["state"]
    assert all(torch.equal(sa[i]["exp_avg_sq"], sb[i]["exp_avg_sq"]) for i in sa)


def test_sft_update_lowers_cross_entropy(base_model):
    lrn = learner(base_model, sft_lr=5e-3, kl_coef=0.0)
    samples = make_samples(6)
    losses = [lrn.sft_update(samples)["sft_loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 0.05 and lrn.version == 4
    assert lrn.optimizer.param_groups[0]["lr"] == 5e-3
    lrn.update(samples)
    assert lrn.optimizer.param_groups[0]["lr"] == 1e-3  # RL steps use the RL rate again


def test_sft_update_weighs_tokens_by_their_mask(base_model):
    """A demonstration whose mask weighs 2 (sft.note_weight) counts as that demonstration twice: the loss is the
    mask-weighted token mean, and the step is the same; `tokens` counts the tokens in the loss."""
    import dataclasses

    a, b = make_samples(9, n=2)
    heavy = dataclasses.replace(b, response_mask=[2.0 * m for m in b.response_mask])
    one, two = learner(base_model, sft_lr=5e-3), learner(base_model, sft_lr=5e-3)
    weighted, repeated = one.sft_update([a, heavy]), two.sft_update([a, b, b])
    assert weighted["sft_loss"] == pytest.approx(repeated["sft_loss"], rel=1e-5)
    assert weighted["tokens"] == sum(m > 0 for s in (a, b) for m in s.response_mask)
    after = two.model.state_dict()
    assert all(torch.allclose(v, after[k], atol=1e-6) for k, v in one.model.state_dict().items())


def test_get_weights_is_a_detached_cpu_copy(base_model):
    lrn = learner(base_model)
    version, sd = lrn.get_weights()
    assert version == 0 and all(t.device.type == "cpu" for t in sd.values())
    lrn.update(make_samples(7))
    version2, sd2 = lrn.get_weights()
    assert version2 == 1
    assert any(not torch.equal(sd[k], sd2[k]) for k in sd)  # the first copy did not move with training


def test_from_config_and_bad_arguments(base_model):
    from orchestra.config import load_config

    cfg = load_config(["algo.micro_batch_size=4", "algo.kl_coef=0.0", "model.device=cpu"])
    lrn = Learner.from_config(cfg, copy.deepcopy(base_model))
    assert lrn.micro_batch_size == 4 and lrn.ref_model is None and lrn.lr == cfg.algo.lr
    assert lrn.sft_lr == cfg.sft.lr and lrn.pad_token_id == PAD
    with pytest.raises(ValueError, match="loss_agg_mode"):
        Learner(base_model, pad_token_id=PAD, loss_agg_mode="avg")
    with pytest.raises(ValueError, match="no samples"):
        lrn.update([])
    with pytest.raises(FileNotFoundError, match="not a learner checkpoint"):
        lrn.load("/nonexistent-dir")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_update_on_cuda_with_bf16_autocast(base_model):
    samples = make_samples(8)
    lrn = learner(base_model, device="cuda", autocast="bfloat16")
    m = lrn.update(samples)
    assert np.isfinite(m["loss"]) and m["version"] == 1.0
    cpu = learner(base_model)
    mc = cpu.update(samples)
    assert m["loss"] == pytest.approx(mc["loss"], abs=1e-5)  # ratio 1: loss is -mean advantage on any device
    version, sd = lrn.get_weights()
    assert all(t.device.type == "cpu" for t in sd.values())


def test_a_restarted_learner_process_holds_a_fresh_policy_at_a_newer_version():
    """SFT's next start (sft.starts): the policy built again from another init seed, the version carried on, so the
    rollout workers' sync (which compares versions) never takes the fresh weights for the ones they hold."""
    from actors.learner_process import LearnerProcess
    from orchestra.config import load_config

    cfg = load_config(["model.device=cpu", "seed=3"])
    proc = LearnerProcess(cfg)
    version, before = proc.get_weights()
    assert proc.restart(11) == proc.version() == version + 1
    after = proc.get_weights()[1]
    assert any(not torch.equal(before[k], after[k]) for k in before)
    again = LearnerProcess(cfg)
    again.restart(11)  # the same init seed gives the same fresh policy
    assert all(torch.equal(after[k], v) for k, v in again.get_weights()[1].items())
