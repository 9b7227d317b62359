"""LLM experts: the Expert protocol, ExpertReply, token estimates, and the OpenAI-compatible expert.

An expert is an LLM used as a tool: `async complete(messages, max_tokens, ctx, purpose=...) -> ExpertReply` and
`cost_bound(prompt_tokens_estimate, max_tokens) -> $`. `purpose` (query | code | answer) tells simulated and
replayed experts what kind of text to produce; a real model reads that from the prompt and ignores it.
Failures are returned as replies with `error` set, never raised.

Here: `OpenAIExpert` (openai SDK, any OpenAI-compatible server: OpenAI, vLLM, other providers). The simulated
expert is tools/experts/sim.py, the replayed one tools/experts/replay.py; tools/registry.py builds them from the
zoo config; tools/orchestra_tools.py turns them into the search / enhance_reasoning / answer tools.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import weakref
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


# Errors worth another try: rate limits, server errors, dropped connections. 4xx other than 429 are final.
_RETRYABLE = ("RateLimitError", "InternalServerError", "APIConnectionError", "ServiceUnavailableError")


class OpenAIExpert(PricedExpert):
    """Chat completions against any OpenAI-compatible endpoint; tokens from `usage`, $ from the PriceTable.
    The API key is read from the env var named `api_key_env` at call time and never logged or returned."""

    def __init__(self, name: str, model: str, prices: PriceTable, *, base_url: str = "", api_key_env: str = "",
                 max_tokens: int = 1024, timeout_s: float = 60.0, retries: int = 3, backoff_s: float = 0.5,
                 latency_s: float = 2.0, temperature: float = 0.0, request_model: str = ""):
        super().__init__(name, model, prices, max_tokens, latency_s)
        self.base_url, self.api_key_env = base_url, api_key_env
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.temperature = temperature
        # the name sent to the server; the priced name may carry a `provider:` prefix
        self.request_model = request_model or self.model.split(":", 1)[-1]
        # one client per event loop (httpx pools are loop-bound); weak keys: a closed loop takes its client along
        self._clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            from openai import AsyncOpenAI  # lazy: `import tools` must not pull in an LLM SDK

            key = os.environ.get(self.api_key_env, "") if self.api_key_env else "EMPTY"
            self._clients[loop] = AsyncOpenAI(base_url=self.base_url or None, api_key=key,
                                              timeout=self.timeout_s, max_retries=0)
        return self._clients[loop]

    async def complete(self, messages: list[Any], max_tokens: int | None = None, ctx: ToolContext | None = None,
                       *, purpose: str = "answer") -> ExpertReply:
        if self.api_key_env and not os.environ.get(self.api_key_env):
            return ExpertReply("", error=f"expert {self.name}: no API key; set the environment variable "
                                         f"{self.api_key_env}", meta={"model": self.name})
        msgs = chat_messages(messages)
        start = time.perf_counter()
        last = ""
        for attempt in range(self.retries + 1):
            try:
                resp = await asyncio.wait_for(self._client().chat.completions.create(
                    model=self.request_model, messages=msgs, max_tokens=int(max_tokens or self.max_tokens),
                    temperature=self.temperature), timeout=self.timeout_s)
            except asyncio.TimeoutError:
                return ExpertReply("", latency_s=time.perf_counter() - start, meta={"model": self.name, "timeout": True},
                                   error=f"expert {self.name}: timed out after {self.timeout_s:.1f}s")
            except Exception as e:
                kind = type(e).__name__
                status = getattr(e, "status_code", None)
                last = f"{kind}" + (f" (HTTP {status})" if status else "")
                if kind in _RETRYABLE or (isinstance(status, int) and (status == 429 or status >= 500)):
                    if attempt < self.retries:
                        await asyncio.sleep(self.backoff_s * (2 ** attempt) * (0.5 + random.random() / 2))
                        continue
                    return ExpertReply("", latency_s=time.perf_counter() - start,
                                       meta={"model": self.name, "retryable": True, "attempts": attempt + 1},
                                       error=f"expert {self.name}: {last} after {attempt + 1} attempts")
                return ExpertReply("", latency_s=time.perf_counter() - start, meta={"model": self.name},
                                   error=f"expert {self.name}: {last}")
            return self._reply(resp, msgs, time.perf_counter() - start, attempt + 1)
        return ExpertReply("", error=f"expert {self.name}: {last}", meta={"model": self.name})  # pragma: no cover

    def _reply(self, resp: Any, msgs: list[dict[str, Any]], latency: float, attempts: int) -> ExpertReply:
        choice = resp.choices[0] if getattr(resp, "choices", None) else None
        text = (choice.message.content if choice is not None else "") or ""
        usage = getattr(resp, "usage", None)
        meta: dict[str, Any] = {"model": self.name, "attempts": attempts}
        if usage is not None and usage.prompt_tokens is not None:
            t_in, t_out = int(usage.prompt_tokens), int(usage.completion_tokens or 0)
        else:  # a server that reports no usage: estimate, and say so
            t_in, t_out = estimate_tokens(msgs), estimate_tokens(text) - 5
            meta["estimated"] = True
        return ExpertReply(text, tokens_in=t_in, tokens_out=max(t_out, 0), latency_s=latency,
                           cost_usd=self.cost(t_in, max(t_out, 0)), meta=meta)
