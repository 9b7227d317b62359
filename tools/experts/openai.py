"""The OpenAI-compatible expert: chat completions against any OpenAI-compatible endpoint (OpenAI, vLLM, other
providers) through the openai SDK, imported lazily.

- Streaming: by default the reply is requested as a stream (`stream_options.include_usage`, which OpenAI and vLLM
  honour), so a long generation keeps its connection busy and a dropped stream still shows what was generated. A
  server that answers a stream request with one JSON body is read as such; a stream that ends with no usage is
  priced from estimated tokens (meta["estimated"]).
- Parameters a server refuses with a 400 ("Unsupported parameter ...") are adapted once and the request is made
  again, not counted as an attempt: streaming off, no `temperature` (OpenAI's reasoning models take only their
  default), `max_completion_tokens` <-> `max_tokens` (OpenAI's current name first; older servers know only the other).
- Retries (tenacity): rate limits (429, honouring Retry-After up to `timeout_s`), server errors and dropped
  connections, with jittered exponential backoff; other 4xx are final; a timeout is returned, not retried (the
  tool server decides about those).
- Cost: tokens x price (tools/pricing.py) summed over every attempt that was billed: the successful one's `usage`,
  and a stream that broke after some output at its estimated tokens. A retry after such a partial attempt asks for
  only the output tokens still left of `max_tokens`, so a call's output never exceeds what its cost bound assumed.
- Relay: with `ctx.on_delta` set, the reply's text is handed on as it arrives (each streamed piece; a reply that
  was not streamed, whole). A stream that breaks after a piece was handed on is final, not retried: what the
  listener got cannot be taken back, and a retry's text would be spliced onto it.
Failures come back as replies with `error` set, never raised. The API key is read from the env var named
`api_key_env` at call time and never logged or returned. Building experts from a zoo is tools/registry.py's job;
binding a trained run's experts to live endpoints is actors/serve/binding.py's.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import random
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestra.types import ToolContext
from tools.experts.base import ExpertReply, PricedExpert, chat_messages, estimate_tokens
from tools.pricing import PriceTable, split_ref

# Errors worth another try: rate limits, server errors, dropped connections. 4xx other than 429 are final.
_RETRYABLE = ("RateLimitError", "InternalServerError", "APIConnectionError", "ServiceUnavailableError")
_TIMEOUTS = ("APITimeoutError", "TimeoutError")
# how servers word a 400 for a parameter they do not take (OpenAI: "Unsupported parameter/value", pydantic-based
# servers: "Extra inputs are not permitted"); other 400s (context too long, bad messages) are final
_REFUSALS = ("unsupported", "not supported", "does not support", "not permitted", "unrecognized", "unknown", "extra")


def _status(e: BaseException) -> int | None:
    status = getattr(e, "status_code", None)
    return status if isinstance(status, int) else None


def _retryable(e: BaseException) -> bool:
    if type(e).__name__ in _TIMEOUTS:
        return False
    status = _status(e)
    return type(e).__name__ in _RETRYABLE or (status is not None and (status == 429 or status >= 500))


def _retry_after(e: BaseException) -> float | None:
    """Seconds a 429/503 asks us to wait (`Retry-After`: seconds or an HTTP date), else None."""
    response = getattr(e, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(when.timestamp() - time.time(), 0.0) if when else None


@dataclass
class _Call:
    """What one complete() has been billed for so far, over all its attempts."""

    tokens_in: int = 0
    tokens_out: int = 0
    estimated: bool = False
    attempts: int = 0
    pieces: list[str] = field(default_factory=list)  # the current attempt's streamed text
    on_delta: Callable[[str], None] | None = None  # ToolContext.on_delta: the listener of the reply's text
    relayed: bool = False  # some text reached the listener: no retry may follow (module docstring)

    def relay(self, text: str) -> None:
        if self.on_delta is not None and text:
            self.relayed = True
            self.on_delta(text)

    def bill(self, t_in: int, t_out: int, estimated: bool) -> None:
        self.tokens_in += max(int(t_in), 0)
        self.tokens_out += max(int(t_out), 0)
        self.estimated |= estimated


class _Exhausted(Exception):
    """Earlier, partial attempts already used up max_tokens: no retry can add anything."""


class _Adapted(Exception):
    """The server refused a parameter and the expert changed it: ask again (not a failed attempt)."""


class OpenAIExpert(PricedExpert):
    """Chat completions against any OpenAI-compatible endpoint; tokens from `usage`, $ from the PriceTable."""

    def __init__(self, name: str, model: str, prices: PriceTable, *, base_url: str = "", api_key_env: str = "",
                 max_tokens: int = 1024, timeout_s: float = 60.0, retries: int = 3, backoff_s: float = 0.5,
                 latency_s: float = 2.0, temperature: float = 0.0, request_model: str = "", stream: bool = True):
        super().__init__(name, model, prices, max_tokens, latency_s)
        self.base_url, self.api_key_env = base_url, api_key_env
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        # what the server accepts, learnt from its 400s (each adapted once): streaming, a temperature (OpenAI's
        # reasoning models take only their default), and the name of the output-token limit (`max_tokens` is
        # deprecated by OpenAI and refused by its reasoning models; older servers know only it)
        self.temperature: float | None = temperature
        self.stream, self.tokens_key = bool(stream), "max_completion_tokens"
        self._adapted: set[str] = set()
        # the name sent to the server: the priced name less a genai-prices `provider:` prefix (a served name such
        # as `llama3:8b` keeps its colon)
        self.request_model = request_model or split_ref(self.model)[1]
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

    def _wait(self, state: Any) -> float:
        """Jittered exponential backoff, or the server's Retry-After when longer (capped at timeout_s)."""
        backoff = self.backoff_s * (2 ** (state.attempt_number - 1)) * (0.5 + random.random() / 2)
        after = _retry_after(state.outcome.exception()) if state.outcome is not None else None
        return min(max(backoff, after or 0.0), self.timeout_s)

    async def complete(self, messages: list[Any], max_tokens: int | None = None, ctx: ToolContext | None = None,
                       *, purpose: str = "answer") -> ExpertReply:
        if self.api_key_env and not os.environ.get(self.api_key_env):
            return ExpertReply("", error=f"expert {self.name}: no API key; set the environment variable "
                                         f"{self.api_key_env}", meta={"model": self.name})
        from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt

        msgs, limit = chat_messages(messages), int(max_tokens or self.max_tokens)
        call, start = _Call(on_delta=ctx.on_delta if ctx is not None else None), time.perf_counter()
        try:
            async for attempt in AsyncRetrying(stop=stop_after_attempt(self.retries + 1), wait=self._wait,
                                               retry=retry_if_exception(lambda e: _retryable(e) and not call.relayed),
                                               reraise=True):
                with attempt:
                    text = await self._attempt(msgs, limit, call)
        except asyncio.TimeoutError:
            self._bill_partial(msgs, call)
            return self._failure(call, start, f"timed out after {self.timeout_s:.1f}s", timeout=True)
        except Exception as e:
            self._bill_partial(msgs, call)
            what = str(e) if isinstance(e, _Exhausted) else self._describe(e)
            if _retryable(e) and call.relayed:
                return self._failure(call, start, f"{what} after part of the reply was relayed (not retried)")
            if _retryable(e):
                return self._failure(call, start, f"{what} after {call.attempts} attempts", retryable=True)
            if type(e).__name__ in _TIMEOUTS:
                return self._failure(call, start, f"timed out after {self.timeout_s:.1f}s", timeout=True)
            return self._failure(call, start, what)
        meta: dict[str, Any] = {"model": self.name, "attempts": call.attempts, "streamed": self.stream}
        if call.estimated:
            meta["estimated"] = True
        return ExpertReply(text, tokens_in=call.tokens_in, tokens_out=call.tokens_out,
                           latency_s=time.perf_counter() - start, cost_usd=self.cost(call.tokens_in, call.tokens_out),
                           meta=meta)

    def _describe(self, e: BaseException) -> str:
        """The error's kind and status, plus a client error's own words (a wrong model name, a prompt too long:
        what the user must fix), cut short and with the key scrubbed should the server echo it."""
        what = type(e).__name__ + (f" (HTTP {_status(e)})" if _status(e) else "")
        status = _status(e)
        if status is not None and 400 <= status < 500 and status != 429:
            detail = " ".join(str(getattr(e, "message", "") or "").split())[:200]
            key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
            if key:
                detail = detail.replace(key, "***")
            what += f": {detail}" if detail else ""
        return what

    def _failure(self, call: _Call, start: float, why: str, **flags: Any) -> ExpertReply:
        meta: dict[str, Any] = {"model": self.name, "attempts": call.attempts, **flags}
        if call.estimated:
            meta["estimated"] = True
        return ExpertReply("", tokens_in=call.tokens_in, tokens_out=call.tokens_out,
                           latency_s=time.perf_counter() - start, cost_usd=self.cost(call.tokens_in, call.tokens_out),
                           meta=meta, error=f"expert {self.name}: {why}")

    def _bill_partial(self, msgs: list[dict[str, Any]], call: _Call) -> None:
        """A stream that broke after some output was generated (and is billed by the server): count it."""
        if call.pieces:
            call.bill(estimate_tokens(msgs), max(estimate_tokens("".join(call.pieces)) - 5, 1), True)
            call.pieces = []

    async def _attempt(self, msgs: list[dict[str, Any]], limit: int, call: _Call) -> str:
        self._bill_partial(msgs, call)  # the attempt before this one broke mid-stream
        left = limit - call.tokens_out
        if left < 1:
            raise _Exhausted("broken streams used up max_tokens before a reply was complete")
        call.attempts += 1
        while True:
            try:
                return await asyncio.wait_for(self._request(msgs, left, call), timeout=self.timeout_s)
            except _Adapted:
                continue

    def _adapt(self, e: BaseException) -> bool:
        """A 400 refusing a parameter this expert can do without (or rename): change it, once. True if changed."""
        text = str(getattr(e, "message", "") or e).lower()
        if _status(e) != 400:
            return False
        # any 400 about streaming (not offered; OpenAI: "organization must be verified to stream this model")
        if self.stream and "stream" in text and "stream" not in self._adapted:
            self.stream, what = False, "stream"
        elif not any(w in text for w in _REFUSALS):
            return False
        elif self.temperature is not None and "temperature" in text and "temperature" not in self._adapted:
            self.temperature, what = None, "temperature"
        elif self.tokens_key in text and "tokens_key" not in self._adapted:
            other = "max_tokens" if self.tokens_key == "max_completion_tokens" else "max_completion_tokens"
            self.tokens_key, what = other, "tokens_key"
        else:
            return False
        self._adapted.add(what)
        return True

    async def _request(self, msgs: list[dict[str, Any]], max_tokens: int, call: _Call) -> str:
        kwargs: dict[str, Any] = {"model": self.request_model, "messages": msgs, self.tokens_key: max_tokens}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.stream:
            kwargs.update(stream=True, stream_options={"include_usage": True})
        try:
            resp = await self._client().chat.completions.create(**kwargs)
        except Exception as e:
            if self._adapt(e):
                raise _Adapted() from e
            raise
        if not self.stream:
            return self._usage(resp, msgs, call)
        if "text/event-stream" not in resp.response.headers.get("content-type", "text/event-stream"):
            # a server that ignores stream=true and answers with one JSON body
            from openai.types.chat import ChatCompletion

            return self._usage(ChatCompletion.model_validate(json.loads(await resp.response.aread())), msgs, call)
        usage = None
        async for chunk in resp:
            for choice in getattr(chunk, "choices", None) or []:
                delta = getattr(choice, "delta", None)
                if delta is not None and getattr(delta, "content", None):
                    call.pieces.append(delta.content)
                    call.relay(delta.content)
            usage = getattr(chunk, "usage", None) or usage
        text, call.pieces = "".join(call.pieces), []
        if usage is not None and usage.prompt_tokens is not None:
            call.bill(usage.prompt_tokens, usage.completion_tokens or 0, False)
        else:  # a server that streams no usage: estimate, and say so
            call.bill(estimate_tokens(msgs), estimate_tokens(text) - 5, True)
        return text

    @staticmethod
    def _usage(resp: Any, msgs: list[dict[str, Any]], call: _Call) -> str:
        choice = resp.choices[0] if getattr(resp, "choices", None) else None
        text = (choice.message.content if choice is not None else "") or ""
        usage = getattr(resp, "usage", None)
        if usage is not None and usage.prompt_tokens is not None:
            call.bill(usage.prompt_tokens, usage.completion_tokens or 0, False)
        else:  # a server that reports no usage: estimate, and say so
            call.bill(estimate_tokens(msgs), estimate_tokens(text) - 5, True)
        call.relay(text)  # not streamed: the listener gets the reply whole
        return text
