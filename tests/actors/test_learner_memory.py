"""actors.learner.Learner with its memory bounds on (orchestra/policy/memory.py): activation checkpointing, logits in
chunks and micro-batches cut by a token budget leave GRPO and SFT steps as they were (metrics and gradients, full and
LoRA, with the shared prefix), keep eval semantics (the first step's ratio is 1 with a LoRA dropout), and come from
config. CPU, tiny Qwen3s built here."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from actors.learner import Learner
from orchestra.types import TrainSample
from tests.actors.test_learner import PAD, grads, tiny_qwen3

MEMORY = dict(gradient_checkpointing=True, logit_chunk_tokens=16, micro_batch_tokens=100)  # rows of 38-54 tokens


def samples_sharing_a_prefix(seed: int, n: int = 8) -> list[TrainSample]:
    """Reprompt-like turns: a shared system prefix of 36 tokens, own tails, responses with masked tool tokens."""
    rng = random.Random(seed)
    system = [rng.randrange(1, 300) for _ in range(36)]
    out = []
    for i in range(n):
        r = [rng.randrange(1, 300) for _ in range(rng.randint(2, 10))]
        m = [1] * len(r)
        if len(r) > 4 and i % 2:
            m[2:4] = [0, 0]
        out.append(TrainSample(system + [rng.randrange(1, 300) for _ in range(rng.randint(1, 8))], r, m,
                               [-rng.uniform(4, 7) if k else 0.0 for k in m], rng.choice([-1.5, -0.5, 0.7, 1.2])))
    return out


def make(model, **kw) -> Learner:
    args = dict(pad_token_id=PAD, lr=1e-3, sft_lr=1e-3, kl_coef=1e-2, micro_batch_size=4, grad_clip=0.0,
                min_shared_prefix=16)
    return Learner(copy.deepcopy(model), **{**args, **kw})


def lora_qwen3(dropout: float = 0.0):
    from orchestra.policy.lora import attach

    model = attach(tiny_qwen3(), r=4, alpha=8.0, dropout=dropout)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        for name, p in model.named_parameters():  # B = 0 at init: give the adapters weight to carry grads
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.1)
    return model


@pytest.mark.parametrize("arch", ["full", "lora"])
def test_memory_bounds_leave_grpo_and_sft_steps_unchanged(arch):
    model = tiny_qwen3() if arch == "full" else lora_qwen3()
    samples = samples_sharing_a_prefix(0)
    plain, bounded = make(model), make(model, **MEMORY)
    assert len(bounded._micro_batches(samples)) > len(plain._micro_batches(samples))  # the budget cut more
    for step in ("update", "sft_update"):
        m0, m1 = getattr(plain, step)(samples), getattr(bounded, step)(samples)
        for a, b in zip(grads(plain), grads(bounded), strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
        for k in ("loss", "pg_loss", "kl", "entropy", "rollout_logprob_diff", "sft_loss", "tokens"):
            if k in m0:
                assert m1[k] == pytest.approx(m0[k], rel=1e-5, abs=1e-7), (step, k)


def test_eval_semantics_hold_under_checkpointing():
    """A LoRA dropout of 0.5 would make the first step's old/new ratio differ from 1 if it were active."""
    lrn = make(lora_qwen3(dropout=0.5), kl_coef=0.0, **MEMORY)
    m = lrn.update(samples_sharing_a_prefix(1))
    assert m["ppo_kl"] == 0.0 and m["clipfrac"] == 0.0 and m["grad_norm"] > 0


def test_memory_settings_come_from_config():
    from orchestra.config import load_config

    cfg = load_config(["model.device=cpu", "algo.micro_batch_tokens=4096", "algo.logit_chunk_tokens=512"])
    lrn = Learner.from_config(cfg, tiny_qwen3())
    assert lrn.encoding["gradient_checkpointing"] is False  # null: on only for a learner on CUDA
    assert lrn.encoding["logit_chunk_tokens"] == 512 and lrn.micro_batch_tokens == 4096
    lrn = Learner.from_config(load_config(["model.device=cpu", "algo.gradient_checkpointing=true"]), tiny_qwen3())
    assert lrn.encoding["gradient_checkpointing"] is True
    # h100_2x8's warm start builds its learner this way too (actors/learner_process.py -> from_config)
    lrn = Learner.from_config(load_config(["experiment=h100_2x8", "model.device=cpu"]), tiny_qwen3())
    assert lrn.encoding["gradient_checkpointing"] is True and lrn.micro_batch_tokens == 32768
    with pytest.raises(ValueError, match="micro_batch_tokens"):
        Learner(tiny_qwen3(), pad_token_id=PAD, micro_batch_tokens=-1)
