"""Shared by tests/cluster/test_vllm_cpu.py and bench/vllm_cpu_engine.py: a tiny policy checkpoint, the agent's own
first-turn prompts, and the HF engine's greedy reference on them.

The checkpoint is the embedded tiny Qwen3 (tied embeddings, as the trained policy) at a seeded random init with its
embedding scaled: a fresh init is near-uniform over 4,096 tokens, where greedy agreement would hinge on ties and
test nothing; scaled ×2 the next-token distribution is peaked (top log-prob near 0) like a trained policy's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from orchestra.engine import Generation, Sampling


def make_checkpoint(out: Path, seed: int, scale: float = 2.0) -> Path:
    """save_pretrained dir of the tiny policy (config, safetensors, tokenizer, chat template)."""
    import torch

    from orchestra.config import load_config
    from orchestra.policy.models import load_policy_from_config

    model, tok = load_policy_from_config(load_config([]).model, seed=seed)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(scale)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def agent_prompts(checkpoint: Path, n: int) -> tuple[list[list[int]], list[int]]:
    """n first-turn prompts as the agent loop encodes them (system prompt, tool catalogue, question), and the
    policy's stop ids."""
    from orchestra.agent.prompt import Prompter
    from orchestra.engine import eos_token_ids
    from orchestra.policy.models import load_tokenizer
    from tests.helpers.fakes import FakeTool, make_task

    tok = load_tokenizer(str(checkpoint))
    prompter = Prompter(tok)
    tools = [FakeTool(name, cost_usd=0.001, reply="r", answers=name == "answer").schema()
             for name in ("search", "enhance_reasoning", "answer")]
    prompts = []
    for i in range(n):
        task = make_task(i, problem=f"Question {i}: what is {i * 7 + 3} times {i + 2}? Use the tools.",
                         pref={"accuracy": 1.0, "cost": 0.1 * (i % 8), "latency": 0.0})
        prompts.append(prompter.encode(prompter.first_messages(task), tools))
    return prompts, eos_token_ids(tok)


def greedy(n_tokens: int, stop: list[int]) -> Sampling:
    return Sampling(max_tokens=n_tokens, temperature=0.0, stop_token_ids=list(stop))


async def run_all(engine: Any, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
    return list(await asyncio.gather(*[engine.generate(p, sampling) for p in prompts]))


def hf_reference(checkpoint: Path, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
    """The project's HFEngine on the same checkpoint, float32, all prompts concurrently."""
    from orchestra.engine.hf import HFEngine
    from orchestra.policy.models import load_policy

    model, tok = load_policy(str(checkpoint))
    return asyncio.run(run_all(HFEngine.from_model(model, tok), prompts, sampling))


def agreement(a: list[Generation], b: list[Generation]) -> tuple[int, float]:
    """(sequences with identical token ids, max |log-prob difference| over the tokens both generated)."""
    same = sum(x.token_ids == y.token_ids for x, y in zip(a, b, strict=True))
    diff = max((abs(u - v) for x, y in zip(a, b, strict=True) for u, v in zip(x.logprobs, y.logprobs)),
               default=0.0)
    return same, diff
