"""The agent loop's client for tool-server actors (actors/tool_server.py): `RayToolClient` implements
orchestra.agent.loop.ToolClient over actor handles; a call whose actor dies or times out is returned as an error
result, and the restarted actor (max_restarts) serves later calls.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import ray

from orchestra.types import Task, ToolCall, ToolContext, ToolResult
from tools.base import unknown_tool

_ACTOR_ERRORS: tuple[type[BaseException], ...] = tuple(
    getattr(ray.exceptions, n) for n in ("RayActorError", "ActorDiedError", "ActorUnavailableError")
    if hasattr(ray.exceptions, n))


class RayToolClient:
    """orchestra.agent.loop.ToolClient over tool-server actor handles; never raises from `call`.

    `max_in_flight` > 0 caps the tool calls this client has outstanding at once, over ALL tools (the
    servers' own max_concurrency caps each tool separately); waiting for a slot is added to `queue_s`."""

    def __init__(self, handles: dict[str, Any], timeout_s: float | None = 120.0, max_in_flight: int = 0):
        self.handles = dict(handles)
        self.timeout_s = timeout_s
        self._schemas: dict[tuple[str, str], dict[str, Any]] = {}
        self.max_in_flight = max_in_flight
        self._slots: asyncio.Semaphore | None = None  # made on first call, inside the actor's running event loop

    def _key(self, name: str, task: Task) -> tuple[str, str]:
        return name, json.dumps([task.model_mapping, task.pricing], sort_keys=True, default=str)

    def _names(self, task: Task) -> list[str]:
        return [n for n in (task.tools or sorted(self.handles)) if n in self.handles]

    def schemas(self, task: Task) -> list[dict[str, Any]]:
        """Cached per (tool, model_mapping, pricing); a miss is one blocking round trip per tool."""
        missing = [n for n in self._names(task) if self._key(n, task) not in self._schemas]
        if missing:
            got = ray.get([self.handles[n].schema.remote(task) for n in missing], timeout=self.timeout_s)
            self._schemas.update({self._key(n, task): s for n, s in zip(missing, got, strict=True)})
        return [self._schemas[self._key(n, task)] for n in self._names(task)]

    async def aschemas(self, task: Task) -> list[dict[str, Any]]:
        """The same, without blocking an event loop (warm the cache before AgentLoop.run in async code)."""
        missing = [n for n in self._names(task) if self._key(n, task) not in self._schemas]
        if missing:
            got = await asyncio.gather(*[self.handles[n].schema.remote(task) for n in missing])
            self._schemas.update({self._key(n, task): s for n, s in zip(missing, got, strict=True)})
        return self.schemas(task)

    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        if self.max_in_flight <= 0:
            return await self._call(call, ctx)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_in_flight)
        start = time.perf_counter()
        async with self._slots:
            waited = time.perf_counter() - start
            result = await self._call(call, ctx)
        result.meta["queue_s"] = float(result.meta.get("queue_s", 0.0)) + waited
        return result

    async def _call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        handle = self.handles.get(call.name)
        if handle is None:
            return unknown_tool(call.name, self._names(ctx.task) or sorted(self.handles))
        start = time.perf_counter()
        try:
            return await asyncio.wait_for(handle.call.remote(call.to_dict(), ctx), timeout=self.timeout_s)
        except asyncio.TimeoutError:
            return ToolResult.failure(f"{call.name}: no reply from its tool server within {self.timeout_s:g}s",
                                      meta={"timeout": True, "queue_s": time.perf_counter() - start})
        except _ACTOR_ERRORS as e:
            return ToolResult.failure(f"{call.name}: its tool server failed during the call "
                                      f"({type(e).__name__}); it is being restarted, try again",
                                      retryable=True, meta={"actor_error": True})
        except Exception as e:  # anything else Ray raises is still an observation, not a crash
            return ToolResult.failure(f"{call.name}: tool server error: {type(e).__name__}: {str(e)[:200]}",
                                      meta={"actor_error": True})
