"""Engines generate the orchestrator's tokens: token ids in, token ids (+ logprobs) out.

The model's own tokens are never re-tokenized between turns; the agent loop keeps ids end to end.
This package's root holds the contract every engine keeps: `Engine` (the protocol), `Sampling` (one request's
settings) and `Generation` (what comes back). Engines: hf.py (HF transformers on CPU or one GPU, batched; its KV
caches kv_reuse.py, its token draws sampling.py), vllm.py (the GPU engine, the `gpu` extra, imported lazily),
remote.py (a vLLM server over its OpenAI-compatible API; vllm_ext.py is the worker extension it reloads with),
scripted.py (fixed routers as engines: SFT demonstrations, baselines, benchmarks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


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
