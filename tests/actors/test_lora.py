"""LoRA policies (orchestra/policy/lora.py + actors/learner.py): only adapters train, the reference is the adapter-free
model, adapter-only weight sync rebuilds exactly the learner's policy in a plain engine model, after SFT the
adapter is folded into the base, and save/load resumes the adapter. CPU, a tiny Qwen3 built here, no Ray."""

from __future__ import annotations

import copy

import pytest
import torch

from actors.learner import Learner
from actors.rollout_worker import RolloutWorker
from orchestra.engine.hf import HFEngine
from orchestra.policy import lora
from tests.actors.test_learner import PAD, make_samples, tiny_qwen3


@pytest.fixture(scope="module")
def base_model():
    return tiny_qwen3()


def lora_learner(model, **kw) -> Learner:
    peft_model = lora.attach(copy.deepcopy(model), r=4, alpha=8.0, top_layers=1)
    args = dict(pad_token_id=PAD, lr=5e-2, kl_coef=1e-2, micro_batch_size=32, grad_clip=0.0)
    args.update(kw)
    return Learner(peft_model, **args)


class _Worker(RolloutWorker):
    """The worker's weight-sync path alone, around a plain HF engine (no tools, no agent loop)."""

    def __init__(self, model):
        self.engine, self.version, self._merger, self.worker_id = HFEngine(model, [1], PAD), 0, None, 0


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


def test_only_adapters_of_the_top_layer_train_and_no_reference_copy_is_kept(base_model):
    lrn = lora_learner(base_model)
    names = [n for n, p in lrn.model.named_parameters() if p.requires_grad]
    assert names and all(".lora_" in n for n in names)
    assert all(".layers.1." in n for n in names)  # top_layers=1 of 2
    assert lrn.ref_model is None and lrn.has_reference
    before = {n: p.clone() for n, p in lrn.model.named_parameters() if not p.requires_grad}
    out = lrn.update(make_samples(0))
    assert out["skipped"] == 0.0 and out["version"] == 1.0
    after = dict(lrn.model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before)  # the base is frozen
    # the reference (adapter disabled) is the model as handed over; the policy moved away from it
    ids = [5, 17, 42, 7]
    with lrn.model.disable_adapter():
        ref = logits(lrn.model, ids)
    assert torch.allclose(ref, logits(base_model, ids), atol=1e-5)
    assert not torch.allclose(logits(lrn.model, ids), ref, atol=1e-4)


def test_adapter_only_sync_rebuilds_the_learners_policy_in_a_plain_model(base_model):
    lrn = lora_learner(base_model)
    worker = _Worker(copy.deepcopy(base_model))
    version, full = lrn.get_weights()
    assert lora.LORA_KEY in full and "model.embed_tokens.weight" in full
    worker.load_weights(version, full)
    ids = [3, 9, 27, 81, 243]
    for seed in range(3):  # several steps: each merge starts from the base, never from the last merge
        lrn.update(make_samples(seed))
        version, payload = lrn.get_weights(adapter_only=True)
        assert set(payload) == {lora.LORA_KEY}
        n_payload = sum(a.numel() + b.numel() for a, b, _ in payload[lora.LORA_KEY].values())
        assert n_payload < sum(p.numel() for p in base_model.parameters()) / 10  # adapters only: small
        assert worker.load_weights(version, payload) == version
        assert torch.allclose(logits(worker.engine.model, ids), logits(lrn.model, ids), atol=1e-4)
    # a restarted worker (initial weights) gets base + adapter in one full payload and matches too
    fresh = _Worker(copy.deepcopy(base_model))
    fresh.load_weights(*lrn.get_weights())
    assert torch.allclose(logits(fresh.engine.model, ids), logits(lrn.model, ids), atol=1e-4)


def test_reset_reference_folds_the_adapter_into_the_base(base_model):
    lrn = lora_learner(base_model)
    lrn.sft_update(make_samples(1))  # SFT trains the adapter
    ids = [11, 12, 13]
    sft_policy = logits(lrn.model, ids)
    lrn.reset_reference()
    assert lora.is_peft(lrn.model)
    assert torch.allclose(logits(lrn.model, ids), sft_policy, atol=1e-5)  # the policy is unchanged
    with lrn.model.disable_adapter():  # and the reference now is that policy
        assert torch.allclose(logits(lrn.model, ids), sft_policy, atol=1e-5)
    assert all(".lora_" in n for n, p in lrn.model.named_parameters() if p.requires_grad)
    assert lrn.optimizer.param_groups[0]["params"] == lrn.params


def test_save_and_load_resume_the_adapter_and_write_a_plain_checkpoint(base_model, tmp_path):
    from transformers import AutoModelForCausalLM

    lrn = lora_learner(base_model)
    lrn.sft_update(make_samples(2))
    lrn.reset_reference()
    lrn.update(make_samples(3))
    lrn.save(tmp_path / "ckpt")
    ids = [21, 22, 23, 24]
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").eval()  # evaluation / serving load this
    assert torch.allclose(logits(plain, ids), logits(lrn.model, ids), atol=1e-4)
    other = lora_learner(base_model)
    other.load(tmp_path / "ckpt")
    assert other.version == lrn.version
    assert torch.allclose(logits(other.model, ids), logits(lrn.model, ids), atol=1e-5)
    with other.model.disable_adapter(), lrn.model.disable_adapter():  # the base (reference) came back too
        assert torch.allclose(logits(other.model, ids), logits(lrn.model, ids), atol=1e-5)
    a, b = lrn.update(make_samples(4)), other.update(make_samples(4))
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)  # optimizer state resumed


def test_a_full_checkpoint_is_refused_by_a_lora_learner(base_model, tmp_path):
    full = Learner(copy.deepcopy(base_model), pad_token_id=PAD, kl_coef=0.0)
    full.save(tmp_path / "full")
    with pytest.raises(FileNotFoundError, match="LoRA learner"):
        lora_learner(base_model).load(tmp_path / "full")
