"""A ToolClient that makes each distinct tool call once and replays its result to every later caller.

Scripted plays of one run call the same tool with the same arguments in the same context many times: every plan
that opens with `enhance_reasoning` on a task writes and runs the same program before its answer call; each SFT
demonstration replays a (task, plan) that exploration already played, under another preference only; SFT's check
plays the run's router on those explored tasks again. A tool's result depends on the task, the call and the
episode's context, never on the preference (the assumption that lets one exploration serve every preference vector,
orchestra/routing/explore.py), so the trainer plays every scripted episode through one `CallCache`: exploration,
demonstrations, SFT's check and the router's held-out plays (cluster/trainer.py). A replayed result is the first
call's, its $ and seconds included: a route is charged for every call it makes, as if made again. Failures are not
kept (the next caller makes the call itself). τ² tasks (`category: func_call`) bypass it: their tools answer from a
session the episode's earlier calls changed, which the context below does not show.
The policy's own episodes come here only where `zoo.server.client_replay` > 0: each rollout worker then keeps that
many results (least recently used dropped first). The same assumption holds there, and pays most in SFT's checks and
the evaluations, which play each task under several vectors: the policy often makes the same call in the same
context under each, and at each check again (actors/rollout_worker.py).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import hashlib
import json
from typing import Any

from orchestra.types import Task, ToolCall, ToolContext, ToolResult


def call_key(tool: str, args: dict[str, Any], ctx: ToolContext) -> str:
    """What decides a deterministic tool's result: the tool and its arguments, the task (not its preference) and
    what the episode gathered before the call. Also the tool servers' cache key (actors/tool_server.py)."""
    t: Task = ctx.task
    blob = json.dumps([tool, args, t.id, t.problem, t.model_mapping, t.pricing, ctx.attempt, ctx.documents,
                       ctx.code_outputs, ctx.seed, ctx.budget_usd_left], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class CallCache:
    """Wraps a ToolClient (`inner`): the first call of a key is made, concurrent callers of the same key wait for
    it, later callers get a copy of its result. `calls` / `made` count what was asked and what reached `inner`.
    `max_kept` > 0 keeps at most that many results, the least recently used dropped first (0: all, for one run's
    scripted plays). Other attributes are `inner`'s (e.g. RayToolClient.aschemas)."""

    def __init__(self, inner: Any, max_kept: int = 0):
        if max_kept < 0:
            raise ValueError(f"max_kept must be >= 0 (0: keep every result), got {max_kept}")
        self.inner, self.max_kept = inner, max_kept
        self.kept: collections.OrderedDict[str, ToolResult] = collections.OrderedDict()
        self._flight: dict[str, asyncio.Future] = {}
        self.calls = self.made = 0

    def schemas(self, task: Task) -> list[dict[str, Any]]:
        return self.inner.schemas(task)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy / unpickling): no recursion through self.inner
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        self.calls += 1
        if ctx.task.category == "func_call":
            return await self._make(call, ctx)
        key = call_key(call.name, call.arguments, ctx)
        if key in self.kept:
            self.kept.move_to_end(key)
            return copy.deepcopy(self.kept[key])
        loop = asyncio.get_running_loop()
        pending = self._flight.get(key)
        if pending is not None and pending.get_loop() is loop:
            first = await asyncio.shield(pending)
            if first is not None and first.ok:
                return copy.deepcopy(first)
            return await self._make(call, ctx)  # the first one failed: this caller tries for itself
        self._flight[key] = mine = loop.create_future()
        result = None
        try:
            result = await self._make(call, ctx)
            if result.ok:
                self.kept[key] = copy.deepcopy(result)  # callers may change theirs
                while self.max_kept and len(self.kept) > self.max_kept:
                    self.kept.popitem(last=False)
        finally:  # also when the caller is cancelled: waiters then make the call themselves
            if self._flight.get(key) is mine:
                del self._flight[key]
            mine.set_result(result)
        return result

    async def _make(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        self.made += 1
        return await self.inner.call(call, ctx)

    def line(self) -> str:
        """"tool calls: 9600 asked, 2400 made (the rest replayed)"."""
        return f"tool calls: {self.calls} asked, {self.made} made (the rest replayed: same call, same context)"
