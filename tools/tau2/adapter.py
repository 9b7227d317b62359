"""τ² domain tools as our Tools, each episode against its own environment, plus the τ² transcript it leaves.

A `Tau2Session` is one episode's world: a fresh environment of the domain and the τ²-format message list
(AssistantMessage / UserMessage / ToolMessage) the official evaluator later replays. `Tau2Sessions` keys
sessions by `ToolContext.episode_id`, so concurrent episodes of the same task never see each other's DB
writes, whichever process or actor runs the tools. `DomainTool` wraps one τ² tool: its OpenAI schema is
τ²'s own, and a call runs through `Environment.get_response` (the path τ²'s orchestrator uses), so the
recorded ToolMessage is byte-for-byte what the evaluator's replay expects. τ² tool errors (bad reservation
id, policy violations) are observations, as in τ², and are also flagged as `error` on our ToolResult.

`transfer_to_human_agents` is replaced by `call_expert` (tools/tau2/call_expert.py) when experts are
given, as in ToolOrchestra. The episode driver (tools/tau2/episode.py) records agent text and user turns
in the same session; scoring is tools/tau2/reward.py.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from orchestra.types import Task, ToolContext, ToolResult
from tools.tau2.domain import Tau2Domain, tau2_task_of

TRANSFER_TOOL = "transfer_to_human_agents"


class Tau2Session:
    """One episode: its environment and its τ² transcript (what the official evaluator scores)."""

    def __init__(self, domain: Tau2Domain, task: Task):
        from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

        self._msg = {"assistant": AssistantMessage, "user": UserMessage, "tool": ToolMessage, "call": ToolCall}
        self.domain, self.task = domain, task
        self.tau2_task = tau2_task_of(task)
        self.env = domain.new_env()
        init = self.tau2_task.initial_state
        if init is not None:  # tasks may start from a modified DB or a prior conversation
            self.env.set_state(initialization_data=init.initialization_data,
                               initialization_actions=init.initialization_actions,
                               message_history=init.message_history or [])
        self.messages: list[Any] = list(init.message_history or []) if init is not None else []
        self._ids = itertools.count()

    def tool_call(self, name: str, arguments: dict[str, Any], requestor: str = "assistant") -> Any:
        """Run one tool call against this episode's environment; record call + response; return the ToolMessage."""
        call = self._msg["call"](id=f"call_{next(self._ids)}", name=name, arguments=dict(arguments),
                                 requestor=requestor)
        role = self._msg["assistant"] if requestor == "assistant" else self._msg["user"]
        self.messages.append(role(role=requestor, content=None, tool_calls=[call]))
        response = self.env.get_response(call)
        self.messages.append(response)
        return response

    def agent_says(self, text: str, **extra: Any) -> None:
        self.messages.append(self._msg["assistant"](role="assistant", content=text, **extra))

    def user_says(self, text: str, **extra: Any) -> None:
        self.messages.append(self._msg["user"](role="user", content=text, **extra))

    def db_hash(self) -> str | None:
        return self.env.get_db_hash()


class Tau2Sessions:
    """Sessions by episode id. Created on first use; `pop` when the episode is scored."""

    def __init__(self, domain: Tau2Domain):
        self.domain = domain
        self._live: dict[str, Tau2Session] = {}

    def get(self, episode_id: str, task: Task) -> Tau2Session:
        if not episode_id:
            raise ValueError("τ² tools need ToolContext.episode_id to find the episode's environment")
        session = self._live.get(episode_id)
        if session is None:
            session = self._live[episode_id] = Tau2Session(self.domain, task)
        elif session.task.id != task.id:
            raise ValueError(f"episode {episode_id} belongs to task {session.task.id}, not {task.id}")
        return session

    def pop(self, episode_id: str) -> Tau2Session | None:
        return self._live.pop(episode_id, None)

    def __len__(self) -> int:
        return len(self._live)


class DomainTool:
    """One τ² domain tool under our Tool protocol (free: τ² tools cost nothing but the turn)."""

    def __init__(self, schema: dict[str, Any], sessions: Tau2Sessions):
        fn = schema["function"]
        self.name, self.description = fn["name"], fn.get("description", "")
        self.parameters = fn.get("parameters") or {"type": "object", "properties": {}}
        self._schema, self.sessions = schema, sessions

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return self._schema

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return 0.0

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        start = time.perf_counter()
        response = self.sessions.get(ctx.episode_id, ctx.task).tool_call(self.name, args)
        text = response.content or ""
        return ToolResult(text=text, latency_s=time.perf_counter() - start,
                          error=text if response.error else None, meta={"tau2_tool": self.name})


def domain_tools(domain: Tau2Domain, sessions: Tau2Sessions, experts: dict[str, Any] | None = None,
                tiers: dict[str, str] | None = None, expert_max_tokens: int = 1024) -> dict[str, Any]:
    """The agent's catalogue: every domain tool, with `transfer_to_human_agents` swapped for `call_expert`
    when `experts` are given (tiers `expert-1..n` -> expert names; a task's model_mapping overrides)."""
    tools: dict[str, Any] = {name: DomainTool(s, sessions) for name, s in domain.tool_schemas.items()}
    if experts:
        from tools.tau2.call_expert import CallExpertTool

        tools.pop(TRANSFER_TOOL, None)
        expert_tool = CallExpertTool(experts, tiers or {}, sessions, tools, max_tokens=expert_max_tokens)
        tools[expert_tool.name] = expert_tool
    return tools
