"""One tool call of an episode, made the same way by every episode runner (the agent loop, orchestra/agent/loop.py,
and τ²'s driver, tools/tau2/episode.py): an unknown tool name becomes a failure result (the model sees the valid
names; no tool runs), a known one runs through the ToolClient with the episode's context (the $ left under its
budget, so a call that would exceed it is refused), and either way the episode's $ and seconds grow by what the
result charged and its record is appended.

Left to the runners: what the call's result means for the episode (answers, documents, messages to a user, error
counts), the events they emit, and their turn bounds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from orchestra.agent.budget import EpisodeBudget
from orchestra.types import Task, ToolCall, ToolContext, ToolRecord, ToolResult, Trajectory


async def call_tool(tools: Any, call: ToolCall, *, task: Task, traj: Trajectory, turn: int, names: Sequence[str],
                    attempts: Counter[str], budget: EpisodeBudget, tool_id: str | None = None,
                    documents: Sequence[str] = (), code_outputs: Sequence[str] = ()) -> ToolResult:
    """Run `call` (or refuse it as unknown) and account for it in `traj`. `names`: the episode's tool names, in the
    order the unknown-tool message lists them; `attempts`: earlier calls per tool id (counted up here); `tool_id`:
    the id the call is counted and recorded under (default `call.tool_id`); `documents` / `code_outputs`: what
    the episode has gathered so far, for the tool's context."""
    tid = call.tool_id if tool_id is None else tool_id
    if call.name not in names:
        result = ToolResult.failure(f"unknown tool {call.name!r}; valid tools are: {', '.join(names)}",
                                    meta={"unknown_tool": True})
    else:
        ctx = ToolContext(task=task, episode_id=traj.episode_id, turn=turn, attempt=attempts[tid],
                          documents=list(documents), code_outputs=list(code_outputs),
                          budget_usd_left=budget.usd_left(traj.cost_usd))
        attempts[tid] += 1
        result = await tools.call(call, ctx)
    # a tool reporting a negative charge (a refund, a clock step) never lowers the episode's totals
    traj.cost_usd += max(result.cost_usd, 0.0)
    traj.latency_s += max(result.latency_s, 0.0)
    traj.tool_records.append(ToolRecord(turn=turn, name=call.name, tool_id=tid, arguments=call.arguments,
                                        result=result))
    return result
