"""orchestra.policy.grpo: collate layout and truncation, token logprobs vs a plain forward, and grpo_loss vs verl's
core_algos called directly (plus a hand-computed clipped objective). CPU, tiny Qwen3, no downloads."""

from __future__ import annotations

import math

import pytest
import torch

from orchestra.policy.grpo import collate, grpo_loss, sft_loss, token_logprobs
from orchestra.types import TrainSample

PAD = 0


def tiny_model(seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                      pad_token_id=PAD, attn_implementation="sdpa")
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(cfg).eval()


def sample(p: list[int], r: list[int], mask: list[int] | None = None, adv: float = 1.0) -> TrainSample:
    return TrainSample(p, r, mask or [1] * len(r), [-0.5] * len(r), adv)


def test_collate_layout_is_prompt_then_response_right_padded():
    b = collate([sample([5, 6, 7], [8, 9], adv=2.0), sample([1], [2, 3, 4], [1, 0, 1], adv=-1.0)], PAD)
    assert b["input_ids"].tolist() == [[5, 6, 7, 8, 9], [1, 2, 3, 4, PAD]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 3]]
    assert b["responses"].tolist() == [[8, 9, PAD], [2, 3, 4]]
    assert b["response_mask"].tolist() == [[1, 1, 0], [1, 0, 1]]
    assert b["response_index"][0, :2].tolist() == [3, 4] and b["response_index"][1].tolist() == [1, 2, 3]
    assert b["advantages"].tolist() == [[2, 2, 0], [-1, -1, -1]]
    assert b["rollout_logprobs"].tolist() == [[-0.5, -0.5, 0], [-0.5, -0.5, -0.5]]
    assert torch.equal(b["old_logprobs"], b["rollout_logprobs"]) and int(b["num_truncated"]) == 0


def test_collate_truncates_prompt_left_then_response_right():
    b = collate([sample([1, 2, 3, 4], [5, 6]), sample([1, 2], [3, 4, 5, 6, 7])], PAD, max_len=4)
    assert b["input_ids"].tolist() == [[3, 4, 5, 6], [2, 3, 4, 5]]
    assert b["response_lengths"].tolist() == [2, 3] and int(b["num_truncated"]) == 2


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="same length"):
        TrainSample([1], [2, 3], [1], [0.0, 0.0])
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        TrainSample([], [2], [1], [0.0])
    with pytest.raises(ValueError, match="no samples"):
        collate([], PAD)
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        grpo_loss(z, z, None, z, z + 1, loss_agg_mode="mean")
    with pytest.raises(ValueError, match="clip_ratio_c"):
        grpo_loss(z, z, None, z, z + 1, clip_ratio_c=1.0)


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_token_logprobs_match_a_plain_full_forward(model, temperature):
    samples = [sample([5, 6, 7], [8, 9]), sample([1], [2, 3, 4], [1, 0, 1])]
    b = collate(samples, PAD)
    lp = token_logprobs(model, b, temperature)
    for row, s in enumerate(samples):
        ids = torch.tensor([s.prompt_ids + s.response_ids])
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        if temperature > 0:
            logits = logits / temperature
        want = logits.log_softmax(-1)[len(s.prompt_ids) - 1:-1].gather(-1, torch.tensor(s.response_ids)[:, None])
        got = lp[row, :len(s.response_ids)]
        torch.testing.assert_close(got, want[:, 0], atol=1e-5, rtol=1e-5)
    assert lp[0, 2] == 0.0  # padding
    lp2, ent = token_logprobs(model, b, 1.0, return_entropy=True)
    assert (ent[0, :2] > 0).all() and ent[0, 2] == 0 and (ent <= torch.log(torch.tensor(300.0)) + 1e-4).all()


def _random_case(seed: int, B: int = 4, T: int = 7):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3
    lp = old + torch.randn(B, T, generator=g) * 0.4  # ratios spread over both clip edges
    ref = old + torch.randn(B, T, generator=g) * 0.2
    adv = torch.randn(B, generator=g).unsqueeze(-1).expand(B, T).contiguous()
    mask = (torch.rand(B, T, generator=g) > 0.25).float()
    return lp, old, ref, adv, mask


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_grpo_loss_equals_verl_core_algos(mode):
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    lp, old, ref, adv, mask = _random_case(1)
    loss, m = grpo_loss(lp, old, ref, adv, mask, 0.2, 0.28, 3.0, mode, "mse", 0.05)
    cfg = ActorConfig(strategy="fsdp", rollout_n=8, ppo_micro_batch_size_per_gpu=4, clip_ratio_low=0.2,
                      clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg_mode=mode)
    pg, pgm = core_algos.compute_policy_loss_vanilla(old, lp, adv, mask, loss_agg_mode=mode, config=cfg)
    kl = core_algos.agg_loss(core_algos.kl_penalty(lp, ref, "mse"), mask, mode)
    torch.testing.assert_close(loss, pg + 0.05 * kl)
    assert m["pg_loss"] == pytest.approx(pg.item()) and m["kl"] == pytest.approx(kl.item())
    assert m["clipfrac"] == pytest.approx(pgm["actor/pg_clipfrac"]) and 0 < m["clipfrac"] < 1


def test_clipped_objective_by_hand():
    # One sequence, 4 tokens, ratio r = exp(d); eps_low 0.2, eps_high 0.28, dual clip c = 3.
    d = torch.tensor([[0.5, -0.5, 0.1, 1.5]])
    adv = torch.tensor([[1.0, 1.0, -2.0, -2.0]])
    r = [math.exp(x) for x in d[0].tolist()]  # 1.649, 0.607, 1.105, 4.482
    per_token = [
        -1.28,  # A=+1, r above 1+0.28: clipped, -A*(1.28)
        -r[1],  # A=+1, r below 1-0.2: max(-r*A, -0.8*A) keeps the unclipped (pessimistic) term
        2 * r[2],  # A=-2, r inside the clip range: -A*r
        2 * 3.0,  # A=-2, r = 4.48 > c: the dual clip caps the loss at -A*c
    ]
    loss, m = grpo_loss(d, torch.zeros(1, 4), None, adv, torch.ones(1, 4), 0.2, 0.28, 3.0, "token-mean", "mse", 0.0)
    assert loss.item() == pytest.approx(sum(per_token) / 4, rel=1e-5)
    assert m["kl"] == 0.0
    assert m["clipfrac"] == pytest.approx(0.25) and m["clipfrac_lower"] == pytest.approx(0.25)


def test_masked_tokens_get_zero_gradient():
    lp, old, ref, adv, mask = _random_case(2)
    lp = lp.clone().requires_grad_(True)
    loss, _ = grpo_loss(lp, old, ref, adv, mask, kl_coef=0.1)
    loss.backward()
    assert (lp.grad[mask == 0] == 0).all()
    assert (lp.grad[mask == 1] != 0).sum() > 0
    lp.grad = None
    sft_loss(lp, mask).backward()
    assert (lp.grad[mask == 0] == 0).all() and (lp.grad[mask == 1] < 0).all()


def test_micro_batch_normalisers_sum_to_the_big_batch_loss():
    lp, old, ref, adv, mask = _random_case(3, B=6)
    for mode in ("token-mean", "seq-mean-token-mean", "token-sum"):
        whole, _ = grpo_loss(lp, old, ref, adv, mask, loss_agg_mode=mode, kl_coef=0.1)
        norms = dict(batch_num_tokens=int(mask.sum()), global_batch_size=int((mask.sum(-1) > 0).sum()))
        parts = sum(grpo_loss(lp[i:i + 2], old[i:i + 2], ref[i:i + 2], adv[i:i + 2], mask[i:i + 2],
                              loss_agg_mode=mode, kl_coef=0.1, **norms)[0] for i in range(0, 6, 2))
        torch.testing.assert_close(parts, whole)


def _shared_prefix_batch(seed: int = 0):
    import random

    rng = random.Random(seed)
    system = [rng.randrange(3, 200) for _ in range(40)]  # the shared system turn + catalogue
    samples = [sample(system + [rng.randrange(3, 200) for _ in range(rng.randint(1, 9))],
                      [rng.randrange(3, 200) for _ in range(rng.randint(1, 6))], adv=rng.choice([-1.0, 0.5, 2.0]))
               for _ in range(5)]
    return collate(samples, pad_id=0)


@pytest.mark.parametrize("arch", ["qwen3", "llama", "qwen3+lora"])
def test_a_shared_prefix_encoded_once_gives_the_same_logprobs_and_gradients(arch):
    from orchestra.policy.grpo import shared_prefix_len

    if arch == "llama":  # SmolLM2's architecture
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=200, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                          attn_implementation="sdpa")
        torch.manual_seed(0)
        model = LlamaForCausalLM(cfg).eval()
    else:
        model = tiny_model()
    if arch.endswith("+lora"):
        from orchestra.policy.lora import attach

        model = attach(model, r=4, alpha=8.0)
        for name, p in model.named_parameters():  # B = 0 at init: give the adapters weight to carry grads
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    batch = _shared_prefix_batch()
    assert shared_prefix_len(batch) >= 40
    results = []
    for min_shared in (0, 16):
        model.zero_grad(set_to_none=True)
        lp = token_logprobs(model, batch, temperature=0.7, min_shared_prefix=min_shared)
        (lp * batch["advantages"]).sum().backward()
        results.append((lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (whole, g_whole), (shared, g_shared) = results
    assert torch.allclose(whole, shared, atol=1e-5)
    assert g_whole.keys() == g_shared.keys() and g_whole
    for name in g_whole:
        assert torch.allclose(g_whole[name], g_shared[name], atol=1e-5, rtol=1e-4), name


def test_no_prefix_is_shared_by_a_single_row_or_rows_that_differ_early():
    from orchestra.policy.grpo import shared_prefix_len

    assert shared_prefix_len(collate([sample([5, 6, 7, 8], [9])], pad_id=0)) == 0
    assert shared_prefix_len(collate([sample([5, 6, 7, 8], [9]), sample([5, 6, 1, 8], [9])], pad_id=0)) == 2
    # identical prompts: each row keeps its last prompt token to itself
    assert shared_prefix_len(collate([sample([5, 6, 7], [9]), sample([5, 6, 7], [4, 4])], pad_id=0)) == 2
