"""Engines generate the orchestrator's tokens: token ids in, token ids (+ logprobs) out.

The model's own tokens are never re-tokenized between turns; the agent loop keeps ids end to end.
This package's root holds the contract every engine keeps: `Engine` (the protocol), `Sampling` (one request's
settings), `Generation` (what comes back) and `eos_token_ids` (the ids that end a turn). Engines: hf.py (HF
transformers on CPU or one GPU, batched; its KV caches kv_reuse.py, its token draws sampling.py), vllm.py (the GPU
engine, the `gpu` extra, imported lazily), remote.py (a vLLM server over its OpenAI-compatible API; vllm_ext.py is the
worker extension it reloads with). Fixed routers played as engines (SFT demonstrations, baselines) write the agent's
tool calls, so they live with the agent (orchestra/agent/scripted.py). Nothing here imports the rest of the core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class Sampling:
    max_tokens: int = 96
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]  # log p of each generated token under the sampling policy's (untempered) model
    finish_reason: str = "stop"  # stop | length


@runtime_checkable
class Engine(Protocol):
    """Optionally also `release(ids)`: the episode that generated `ids` ended (engines keeping its cache drop it)."""

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation: ...


def single_token_id(tok: Any, text: str) -> int | None:
    """The id of `text` if the tokenizer holds it as one token, else None."""
    ids = tok.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def eos_token_ids(tokenizer: Any) -> list[int]:
    """Ids that end a turn: the tokenizer's eos plus ChatML's <|im_end|> and <|endoftext|> when single tokens."""
    out: list[int] = []
    candidates = [tokenizer.eos_token_id] + [single_token_id(tokenizer, t) for t in ("<|im_end|>", "<|endoftext|>")]
    for tid in candidates:
        if tid is not None and tid not in out:
            out.append(int(tid))
    return out
