"""The web search tool: Tavily through tavily-python's AsyncTavilyClient, with an on-disk answer cache.

Behaviour a production caller needs:
* The API key is read from the environment variable named by `api_key_env` at call time and is never put in
  a result, an error message or a log line (any echo of it is masked as ***). No key -> an immediate, clear
  error result; we never fall back to Tavily's keyless mode (it would be unpaid, unmetered traffic).
* Every request is bounded by `timeout_s` (asyncio.wait_for around the client's own timeout): connection
  errors, HTTP errors (401 bad key, 429 rate limit, ...) and timeouts become error results, never raise.
* Successful responses are cached as JSON files keyed by (query, max_results) and written atomically, so
  re-runs are reproducible and a query is never paid for twice: a cache hit costs $0 and says meta["cached"].
  The cache is consulted before the key, so a warm cache works offline.
* cost = price_per_call per successful (uncached) request; failures cost $0 (Tavily bills successful calls).
`api_base_url` is passed through to the client, so tests point it at a fake server on 127.0.0.1.
Retries and rate limits belong to the tool server (actors/tool_server.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestra.schema import function_schema
from orchestra.types import Task, ToolContext, ToolResult

CACHE_VERSION = 1


class WebSearch:
    """Tool "web_search": search the web with Tavily and return titles, URLs and content snippets."""

    name = "web_search"
    description = ("Search the web (Tavily) and return the top results as title, URL and a content snippet. "
                   "Use a focused query.")
    parameters = {"type": "object", "properties": {"query": {"type": "string", "description": "the search query"}},
                  "required": ["query"], "additionalProperties": False}
    needs_network = True  # tools/check.py tolerates an offline failure of the example call

    def __init__(self, api_base_url: str = "", api_key_env: str = "TAVILY_API_KEY",
                 cache_dir: str = "~/.cache/orchestra/tavily", timeout_s: float = 10.0, max_results: int = 5,
                 price_per_call: float = 0.008, search_depth: str = "basic", max_chars_per_result: int = 1000):
        """`cache_dir` "" disables the cache. All values mirror orchestra.config.WebSearchConfig."""
        if timeout_s <= 0 or max_results < 1 or price_per_call < 0:
            raise ValueError("web search: timeout_s > 0, max_results >= 1 and price_per_call >= 0 are required")
        self.api_base_url, self.api_key_env = api_base_url, api_key_env
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir else None
        self.timeout_s, self.max_results, self.price_per_call = float(timeout_s), int(max_results), float(price_per_call)
        self.search_depth, self.max_chars = search_depth, int(max_chars_per_result)
        # Import the SDK now, not inside the first call's timeout: a slow import would eat (and overrun) it.
        from tavily import AsyncTavilyClient

        self._client_cls = AsyncTavilyClient

    @classmethod
    def from_config(cls, cfg: Any, **kw) -> WebSearch:
        names = ("api_base_url", "api_key_env", "cache_dir", "timeout_s", "max_results", "price_per_call")
        return cls(**{n: getattr(cfg, n) for n in names}, **kw)

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return function_schema(self.name, self.description, self.parameters)

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return self.price_per_call

    def example_args(self) -> dict[str, Any]:
        return {"query": "ToolOrchestra orchestrator model"}

    # -- cache --------------------------------------------------------------------------------------------
    def _cache_path(self, query: str) -> Path | None:
        if self.cache_dir is None:
            return None
        key = json.dumps([CACHE_VERSION, query, self.max_results, self.search_depth], ensure_ascii=False)
        return self.cache_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:40]}.json"

    def _cache_get(self, query: str) -> dict[str, Any] | None:
        path = self._cache_path(query)
        if path is None or not path.is_file():
            return None
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # a corrupt entry is a miss, and is overwritten by the next success
        return entry.get("response") if entry.get("query") == query else None

    def _cache_put(self, query: str, response: dict[str, Any]) -> None:
        path = self._cache_path(query)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"query": query, "max_results": self.max_results, "saved_at": time.time(),
                           "response": response}, f, ensure_ascii=False)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    # -- calling --------------------------------------------------------------------------------------------
    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        start = time.perf_counter()
        query = args.get("query") if isinstance(args, dict) else None
        if not isinstance(query, str) or not query.strip():
            return ToolResult.failure("web_search: `query` must be a non-empty string", meta={"invalid_arguments": True})
        query = query.strip()
        cached = self._cache_get(query)
        if cached is not None:
            return self._result(query, cached, cost=0.0, latency=time.perf_counter() - start, cached=True)
        key = os.environ.get(self.api_key_env, "").strip()
        if not key:
            return ToolResult.failure(f"web_search: no API key; set the {self.api_key_env} environment variable",
                                      meta={"no_api_key": True})
        try:
            response = await asyncio.wait_for(self._search(query, key), self.timeout_s)
        except asyncio.TimeoutError:
            return ToolResult.failure(f"web_search: timed out after {self.timeout_s:g} s",
                                      latency_s=time.perf_counter() - start, meta={"timeout": True})
        except Exception as e:  # connection refused, DNS, HTTP 4xx/5xx, bad JSON, ...
            return ToolResult.failure(f"web_search: {_describe(e, key)}", latency_s=time.perf_counter() - start)
        if not isinstance(response, dict) or not isinstance(response.get("results", []), list):
            return ToolResult.failure("web_search: unexpected response shape from the search API",
                                      latency_s=time.perf_counter() - start)
        self._cache_put(query, response)
        return self._result(query, response, cost=self.price_per_call, latency=time.perf_counter() - start,
                            cached=False)

    async def _search(self, query: str, key: str) -> dict[str, Any]:
        client = self._client_cls(api_key=key, api_base_url=self.api_base_url or None)
        try:
            return await client.search(query, max_results=self.max_results, search_depth=self.search_depth,
                                       timeout=self.timeout_s)
        finally:
            await client.close()

    def _result(self, query: str, response: dict[str, Any], cost: float, latency: float, cached: bool) -> ToolResult:
        results = [r for r in response.get("results", []) if isinstance(r, dict)][: self.max_results]
        docs, urls, blocks = [], [], []
        for i, r in enumerate(results, 1):
            title, url = str(r.get("title") or ""), str(r.get("url") or "")
            content = str(r.get("content") or "")[: self.max_chars]
            docs.append(f"{title}: {content}" if title else content)
            urls.append(url)
            blocks.append(f"[{i}] {title} ({url})\n{content}")
        answer = response.get("answer")
        text = (f"Answer: {answer}\n\n" if isinstance(answer, str) and answer else "") + "\n\n".join(blocks)
        return ToolResult(text=text or f"No web results for {query!r}.", cost_usd=cost, latency_s=latency,
                          documents=docs, meta={"urls": urls, "cached": cached, "query": query})


def _describe(error: Exception, key: str) -> str:
    """A one-line, key-free description of a client error."""
    kind = type(error).__name__
    if kind == "InvalidAPIKeyError":
        message = "the API key was rejected (HTTP 401)"
    elif kind == "UsageLimitExceededError":
        message = "usage limit or rate limit exceeded (HTTP 429)"
    elif kind == "ForbiddenError":
        message = "access forbidden (HTTP 403)"
    else:
        message = f"{kind}: {error}".strip().rstrip(":")
    return message.replace(key, "***") if key else message
