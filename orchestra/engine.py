"""Engines generate the orchestrator's tokens: token ids in, token ids (+ logprobs) out.

The model's own tokens are never re-tokenized between turns; the agent loop keeps ids end to end.
`Engine` is the protocol; `HFEngine` (below) runs HF transformers on CPU or one GPU and coalesces concurrent
`generate` calls into batches; orchestra/vllm_engine.py is the GPU engine (the `gpu` extra), imported lazily.
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
    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation: ...
