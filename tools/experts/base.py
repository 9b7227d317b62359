"""LLM experts: the Expert protocol, ExpertReply, token estimates, and the priced base every expert shares.

An expert is an LLM used as a tool: `async complete(messages, max_tokens, ctx, purpose=...) -> ExpertReply` and
`cost_bound(prompt_tokens_estimate, max_tokens) -> $`. `purpose` (query | code | answer) tells simulated and
replayed experts what kind of text to produce; a real model reads that from the prompt and ignores it.
Failures are returned as replies with `error` set, never raised.

Experts: tools/experts/openai.py (any OpenAI-compatible server: OpenAI, vLLM, other providers), sim.py (simulated),
replay.py (recorded outputs); tools/registry.py builds them from the zoo config; tools/orchestra_tools.py turns
them into the search / enhance_reasoning / answer tools.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from orchestra.types import ToolContext
from tools.pricing import PriceTable

PURPOSES = ("query", "code", "answer")


@dataclass
class ExpertReply:
    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # set when the call failed (after retries); cost may still be non-zero

    @property
    def ok(self) -> bool:
        return self.error is None


@runtime_checkable
class Expert(Protocol):
    name: str  # the zoo's key for it
    model: str  # the priced (and requested) model name
    latency_s: float  # typical latency, shown in tool descriptions

    def price(self) -> tuple[float, float]: ...
    def cost_bound(self, prompt_tokens_estimate: int, max_tokens: int | None = None) -> float: ...
    async def complete(self, messages: list[Any], max_tokens: int | None = None, ctx: ToolContext | None = None,
                       *, purpose: str = "answer") -> ExpertReply: ...


def chat_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Accept orchestra Messages, dicts, or a bare string; return OpenAI-style dicts."""
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    out = []
    for m in messages:
        if isinstance(m, dict):
            out.append({"role": m.get("role", "user"), "content": m.get("content", "")})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def estimate_tokens(messages: list[Any]) -> int:
    """A typical tokenizer's count: ~4 characters a token plus a few tokens of chat framing per message."""
    msgs = chat_messages(messages)
    return sum(len(m["content"] or "") for m in msgs) // 4 + 4 * len(msgs) + 1


def bound_tokens(messages: list[Any]) -> int:
    """An upper bound on any real tokenizer's count for budget checks (generous: ~2 characters a token)."""
    msgs = chat_messages(messages)
    return sum(len(m["content"] or "") for m in msgs) // 2 + 8 * len(msgs) + 16


class PricedExpert:
    """What every expert shares: a name, a priced model, a default max_tokens and a typical latency."""

    def __init__(self, name: str, model: str, prices: PriceTable, max_tokens: int, latency_s: float):
        self.name, self.model, self.prices = name, model or name, prices
        self.max_tokens, self.latency_s = int(max_tokens), float(latency_s)
        self.prices.price(self.model)  # unknown model -> UnknownModelError now, at zoo load

    def price(self) -> tuple[float, float]:
        return self.prices.price(self.model)

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return self.prices.cost(self.model, tokens_in, tokens_out)

    def cost_bound(self, prompt_tokens_estimate: int, max_tokens: int | None = None) -> float:
        return self.cost(max(int(prompt_tokens_estimate), 0), int(max_tokens or self.max_tokens))
