"""The Tool protocol and the one guarded way every tool is called.

A tool is any object with `name`, `description`, `parameters` (JSON schema), `schema(task)`,
`cost_bound(args, ctx)` and `async call(args, ctx) -> ToolResult`. Tools never raise for bad input, timeouts
or remote failures: they return `ToolResult.failure(...)`, which the model reads as an observation.

`guarded_call` is the single mechanism shared by in-process clients, tool-server actors, Serve and verl:
argument validation against the schema (naming the field; orchestra/schema.py), the hard budget check (a call whose cost bound
exceeds what is left is refused before it is made), and exception capture for tool bugs.
Retries, timeouts, rate limits and caching belong to actors/tool_server.py.
"""

from __future__ import annotations

import time
from typing import Any, Protocol, runtime_checkable

from orchestra.schema import check_arguments
from orchestra.types import Task, ToolCall, ToolContext, ToolResult


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        """OpenAI function schema; model-backed tools describe each tier's price and latency for `task`."""
        ...

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        """Upper bound on the $ this call can cost (0 for free tools); used to enforce hard budgets."""
        ...

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


async def guarded_call(tool: Tool, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Validate, budget-check, and call `tool`; never raises (a tool bug becomes an error result)."""
    problem = check_arguments(tool.parameters, args)
    if problem:
        return ToolResult.failure(f"{tool.name}: {problem}", meta={"invalid_arguments": True})
    try:
        bound = float(tool.cost_bound(args, ctx))
    except Exception as e:  # a bad `model` tier, say: the model reads it as an observation
        return ToolResult.failure(f"{tool.name}: {e}", meta={"invalid_arguments": True})
    if ctx.budget_usd_left is not None and bound > ctx.budget_usd_left + 1e-12:
        return ToolResult.failure(
            f"budget exhausted: {tool.name} could cost up to ${bound:.6f} but ${max(ctx.budget_usd_left, 0):.6f} is left",
            refused=True, meta={"cost_bound": bound},
        )
    start = time.perf_counter()
    try:
        result = await tool.call(args, ctx)
    except Exception as e:  # never let a tool bug crash an episode
        return ToolResult.failure(f"{tool.name} failed: {type(e).__name__}: {e}",
                                  latency_s=time.perf_counter() - start)
    if not isinstance(result, ToolResult):
        return ToolResult.failure(f"{tool.name} returned {type(result).__name__}, not a ToolResult")
    return result


class LocalToolClient:
    """The agent loop's ToolClient over in-process tool objects (tests, benchmarks, Serve replicas)."""

    def __init__(self, tools: dict[str, Tool]):
        self.tools = dict(tools)

    def names(self) -> list[str]:
        return sorted(self.tools)

    def schemas(self, task: Task) -> list[dict[str, Any]]:
        names = task.tools or sorted(self.tools)
        return [self.tools[n].schema(task) for n in names if n in self.tools]

    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        tool = self.tools.get(call.name)
        if tool is None:
            return unknown_tool(call.name, ctx.task.tools or self.names())
        return await guarded_call(tool, call.arguments, ctx)


def unknown_tool(name: str, valid: list[str]) -> ToolResult:
    return ToolResult.failure(f"unknown tool {name!r}; valid tools are: {', '.join(sorted(valid))}",
                              meta={"unknown_tool": True})
