"""Tool-server actors: one Ray actor per tool (the agent loop's client for them is actors/tool_client.py).

`ToolServer` is a plain async class hosting ONE tool, built inside the actor from (zoo config dict, tool
name) through tools/registry.py so no big object (index, corpus) is pickled. Around every call it adds what
production tool servers need: a concurrency limit, a token-bucket rate limit (actors/rate_limit.py), a per-call timeout, bounded
retries with exponential backoff for results flagged `retryable`, an optional LRU result cache, and
reports service time (`latency_s`, from the tool) apart from queueing (`meta["queue_s"]`).
Paid calls go through the `SpendLedger` (actors/spend_ledger.py): reserve the call's cost bound first, settle
the actual cost after; a refused reservation is a "budget exhausted" error result, so the run cap holds exactly
under concurrency (as long as tools keep their cost within their bound; a timed-out call is settled at its
bound, since what it cost is unknown).
Resources come from the caller (cluster/); `make_tool_server` only applies them.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import importlib
import os
import time
from collections.abc import Callable
from typing import Any

import ray

from actors import metrics
from actors.rate_limit import RateLimiter
from actors.spend_ledger import make_spend_ledger
from orchestra.agent.call_cache import call_key
from orchestra.types import Task, ToolContext, ToolResult
from tools.base import guarded_call


def _load_factory(factory: Any) -> Any:
    if isinstance(factory, str):  # "package.module:callable"
        module, _, attr = factory.partition(":")
        return getattr(importlib.import_module(module), attr)
    return factory


class ToolServer:
    """Hosts one tool (see module docstring). `call` never raises."""

    def __init__(self, zoo_cfg: dict[str, Any], tool_name: str, *, timeout_s: float = 60.0, retries: int = 2,
                 backoff_s: float = 0.2, rate_limit_per_s: float = 0.0, rate_burst: float | None = None,
                 cache_size: int = 0, max_concurrency: int = 64, ledger: Any = None, factory: Any = None,
                 build_kwargs: dict[str, Any] | None = None):
        if factory is not None:
            self.tool = _load_factory(factory)()
        else:
            from tools.registry import build_tools

            self.tool = build_tools(zoo_cfg, [tool_name], **(build_kwargs or {}))[tool_name]
        self.name = tool_name
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.bucket = RateLimiter(rate_limit_per_s, rate_burst)
        self.cache_size = int(cache_size)
        self.cache: collections.OrderedDict[str, ToolResult] = collections.OrderedDict()
        self.slots = asyncio.Semaphore(max(int(max_concurrency), 1))
        self.ledger = ledger
        self.counts = collections.Counter()
        self.waiting = self.running = 0  # calls at this server, for the dashboard's in-flight gauge

    def ready(self) -> int:
        return os.getpid()

    def sandbox_verdict(self, pod_checks: Callable[[], list[str]] | None = None) -> dict[str, Any] | None:
        """The code sandbox as this tool will meet it, probed in this process on this node (the launcher's preflight
        asks every code tool's server: the driver's host says nothing about another node's). None: no code here.
        `pod_checks`: the caller's checks of this node (cluster/k8s_preflight.py: what a KubeRay pod needs), run
        here for the same reason; their lines come back under "pod"."""
        import socket

        backend = getattr(self.tool, "backend", None)
        sandbox = getattr(self.tool, "sandbox", None) or getattr(backend, "sandbox", None)
        if sandbox is None:
            return None
        return {"host": socket.gethostname(), "shortfall": sandbox.shortfall,
                "allow_unconfined": bool(sandbox.allow_unconfined), "pod": pod_checks() if pod_checks else []}

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return self.tool.schema(task)

    def stats(self) -> dict[str, Any]:
        return dict(self.counts)

    async def call(self, call_dict: dict[str, Any], ctx: ToolContext) -> ToolResult:
        arrived = time.perf_counter()
        self.counts["calls"] += 1
        args = call_dict.get("arguments", {}) if isinstance(call_dict, dict) else {}
        key = call_key(self.name, args, ctx) if self.cache_size > 0 else ""
        if key and key in self.cache:
            self.cache.move_to_end(key)
            self.counts["cache_hits"] += 1
            hit = self.cache[key]
            metrics.record("tool_calls_total", tool=self.name, tier=metrics.tier_of(args, True, {}),
                           status="cached")
            return dataclasses.replace(hit, cost_usd=0.0, latency_s=0.0,
                                       meta={**hit.meta, "cached": True, "queue_s": 0.0})
        state = self._in_flight("waiting")
        try:
            await self.bucket.acquire()
            async with self.slots:
                queued = time.perf_counter() - arrived
                state = self._in_flight("running", state)
                result = await self._attempts(args, ctx)
        finally:  # also when the caller cancels
            self._in_flight(None, state)
        result.meta["queue_s"] = queued
        result.meta["server_s"] = time.perf_counter() - arrived
        tier = metrics.tier_of(args, result.ok, ctx.task.model_mapping)
        status = metrics.tool_status(result.meta, result.ok)
        metrics.record("tool_calls_total", tool=self.name, tier=tier, status=status)
        metrics.record("tool_latency_seconds", result.meta["server_s"], tool=self.name, tier=tier)
        metrics.record("tool_cost_usd_total", result.cost_usd, tool=self.name, tier=tier)
        if key and result.ok:
            self.cache[key] = dataclasses.replace(result, meta=dict(result.meta))  # callers may mutate theirs
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        return result

    def _in_flight(self, state: str | None, previous: str | None = None) -> str | None:
        """Move one call between 'waiting' and 'running' (None: gone) and publish both counts."""
        for st, delta in ((previous, -1), (state, 1)):
            if st is not None:
                setattr(self, st, getattr(self, st) + delta)
                metrics.record("tool_in_flight", getattr(self, st), tool=self.name, state=st)
        return state

    async def _attempts(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """`_once`, retried by tenacity while the result says `retryable` (exponential backoff from backoff_s);
        the $ and seconds of every attempt are summed into the result, so a retried paid call is paid in full."""
        from tenacity import AsyncRetrying, retry_if_result, stop_after_attempt, wait_exponential

        total = {"cost": 0.0, "latency": 0.0, "waited": 0.0, "attempts": 0}

        async def once() -> ToolResult:
            result = await self._once(args, ctx)
            total["cost"] += result.cost_usd
            total["latency"] += result.latency_s
            total["attempts"] += 1
            return result

        def before_sleep(state: Any) -> None:
            self.counts["retries"] += 1
            total["waited"] += state.next_action.sleep

        retrying = AsyncRetrying(stop=stop_after_attempt(self.retries + 1),
                                 wait=wait_exponential(multiplier=self.backoff_s, min=0.0, exp_base=2),
                                 retry=retry_if_result(lambda r: not r.ok and r.retryable),
                                 before_sleep=before_sleep,
                                 retry_error_callback=lambda state: state.outcome.result())  # the last result
        result = await retrying(once)
        if not result.ok:
            self.counts["errors"] += 1
        meta = {**result.meta, "attempts": total["attempts"]}
        if total["waited"]:
            meta["retry_wait_s"] = total["waited"]
        return dataclasses.replace(result, cost_usd=total["cost"], latency_s=total["latency"], meta=meta)

    async def _once(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        token = None
        bound = 0.0
        if self.ledger is not None:
            try:
                bound = float(self.tool.cost_bound(args, ctx))
            except Exception:  # bad arguments: guarded_call below returns the error result, unpaid
                bound = 0.0
            if bound > 0:
                try:
                    grant = await self.ledger.reserve.remote(bound)
                except Exception as e:  # no ledger, no paid calls: refusing is the safe side
                    return ToolResult.failure(f"{self.name}: spend ledger unavailable ({type(e).__name__})",
                                              refused=True, retryable=True)
                if not grant["ok"]:
                    return ToolResult.failure(
                        f"budget exhausted: the run's spend cap of ${grant['cap']:.4f} is reached "
                        f"(${grant['spent']:.4f} spent, ${grant['reserved']:.4f} reserved; this call could cost "
                        f"${bound:.6f})", refused=True, meta={"spend_cap": True})
                token = grant["token"]
        settle = 0.0
        try:
            result = await asyncio.wait_for(guarded_call(self.tool, args, ctx), timeout=self.timeout_s)
            settle = result.cost_usd
        except asyncio.TimeoutError:
            settle = bound  # what a timed-out call cost is unknown: charge the run its bound
            self.counts["timeouts"] += 1
            result = ToolResult.failure(f"{self.name}: timed out after {self.timeout_s:g}s", latency_s=self.timeout_s,
                                        meta={"timeout": True, "cost_unknown": token is not None})
        finally:
            if token is not None:
                try:
                    await self.ledger.settle.remote(token, settle)
                except Exception:
                    pass  # the reservation stays open: conservative, the cap still holds
        if token is not None and result.cost_usd > bound + 1e-12:
            result.meta["over_bound"] = True
        return result


def tool_actor_name(name: str, suffix: str = "") -> str:
    """The Ray name of tool `name`'s server (dashboard: `tool:search`); rollout workers look servers up by it."""
    return f"tool:{name}{suffix}"


def make_tool_server(name: str, zoo_cfg: dict[str, Any], *, num_cpus: float = 0.05, max_concurrency: int = 64,
                     max_restarts: int = 3, namespace: str | None = None, actor_name: str | None = None,
                     queue_limit: int = 1024, resources: dict[str, float] | None = None, **server_kwargs: Any) -> Any:
    """Start a ToolServer actor named `tool:<name>`. Ray's own concurrency is max_concurrency + queue_limit so
    queued calls wait inside the actor, where their queueing time is measured; `resources`: custom Ray resources
    (which nodes may host it); `server_kwargs` go to ToolServer."""
    opts: dict[str, Any] = dict(name=actor_name or tool_actor_name(name), num_cpus=num_cpus, max_restarts=max_restarts,
                                max_task_retries=0, max_concurrency=max_concurrency + queue_limit)
    if resources:
        opts["resources"] = dict(resources)
    if namespace:
        opts["namespace"] = namespace
    return ray.remote(ToolServer).options(**opts).remote(zoo_cfg, name, max_concurrency=max_concurrency,
                                                         **server_kwargs)


def make_tool_servers(zoo_cfg: dict[str, Any], names: list[str] | None = None, *, ledger: Any = None,
                      namespace: str | None = None, build_kwargs: dict[str, Any] | None = None,
                      name_suffix: str = "", resources: dict[str, float] | None = None) -> tuple[dict[str, Any], Any]:
    """One ToolServer per tool (default: zoo.tools) with the zoo's `server` settings; a spend ledger is made
    when zoo.spend_cap_usd is set and none is given. Returns ({tool name: handle}, ledger handle or None)."""
    server = dict(zoo_cfg.get("server") or {})
    cap = zoo_cfg.get("spend_cap_usd")
    if ledger is None and cap is not None:
        ledger = make_spend_ledger(cap, name=f"spend_ledger{name_suffix}", namespace=namespace)
    handles = {}
    for name in names if names is not None else list(zoo_cfg.get("tools") or []):
        handles[name] = make_tool_server(
            name, zoo_cfg, num_cpus=server.get("num_cpus", 0.05), max_concurrency=server.get("max_concurrency", 64),
            max_restarts=server.get("max_restarts", 3), namespace=namespace, timeout_s=server.get("timeout_s", 60.0),
            retries=server.get("retries", 2), backoff_s=server.get("backoff_s", 0.2),
            rate_limit_per_s=server.get("rate_limit_per_s", 0.0), cache_size=server.get("cache_size", 0),
            ledger=ledger, build_kwargs=build_kwargs, actor_name=tool_actor_name(name, name_suffix), resources=resources)
    return handles, ledger
