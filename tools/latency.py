"""Modelled latency for local tools: the seconds a result reports, fixed instead of measured, so runs repeat.

The reward's latency term adds the seconds every tool call reports. Simulated and replayed experts report a
virtual, seeded figure; local tools (the sandbox, the retriever, the calculator, web search) measured their wall
time, which differs by milliseconds from run to run and with the machine's load, so two runs with one seed gave
different rewards and different RESULT lines. With `zoo.latency: modelled` (the default) each local tool reports
a fixed figure (`zoo.tool_latency_s`, by tool name: typical seconds, not measured here) and keeps what it
measured in `meta["measured_latency_s"]`; `zoo.latency: measured` reports wall time, and its results say so
(`meta["latency"] = "measured"`). What a tool charges is its own business (the sandbox bills measured seconds at
`zoo.sandbox.price_per_second`, 0 by default).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestra.types import Task, ToolContext, ToolResult

LATENCY_MODES = ("modelled", "measured")


class ReportedLatency:
    """`tool` with its results' seconds set by the mode: `seconds` (modelled) or as measured, labelled."""

    def __init__(self, tool: Any, mode: str, seconds: float):
        if mode not in LATENCY_MODES:
            raise ValueError(f"latency mode must be one of {LATENCY_MODES}, got {mode!r}")
        self.tool, self.mode, self.seconds = tool, mode, float(seconds)
        self.name, self.description, self.parameters = tool.name, tool.description, tool.parameters

    def __getattr__(self, item: str) -> Any:  # what else the wrapped tool offers (its sandbox, its index)
        return getattr(self.tool, item)

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return self.tool.schema(task)

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return self.tool.cost_bound(args, ctx)

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        result = await self.tool.call(args, ctx)
        if self.mode == "measured":
            return dataclasses.replace(result, meta={**result.meta, "latency": "measured"})
        return dataclasses.replace(result, latency_s=self.seconds,
                                   meta={**result.meta, "latency": "modelled", "measured_latency_s": result.latency_s})
