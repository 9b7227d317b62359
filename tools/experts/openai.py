"""The OpenAI-compatible expert: chat completions against any OpenAI-compatible endpoint (OpenAI, vLLM, other
providers) through the openai SDK, imported lazily. Failures come back as replies with `error` set (rate limits
and server errors retried with backoff first), never raised."""

from __future__ import annotations

import asyncio
import os
import random
import time
import weakref
from typing import Any

from orchestra.types import ToolContext
from tools.experts.base import ExpertReply, PricedExpert, chat_messages, estimate_tokens
from tools.pricing import PriceTable

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
