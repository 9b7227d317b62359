"""`call_expert(expert)`: hand the agent's turn to an expert LLM, as ToolOrchestra does on τ²-bench.

In ToolOrchestra's τ² setup the orchestrator keeps the domain tools and replaces `transfer_to_human_agents`
with `call_expert`: the chosen expert sees the policy, the tools and the conversation so far and acts in the
agent's place. Its reply follows the original's output convention, `<think>...</think>` (ignored), then
either `<message>...</message>` (said to the user) or `<tool_call>{...}</tool_call>` blocks (run against the
episode's own environment). A message comes back as the result's `message`, which the episode driver sends
to the user as the agent's turn; tool calls are executed here and their outputs are the observation.

Tiers `expert-1..n` map to expert names (task.model_mapping first, then the zoo's tiers); the expert's tokens
are priced like any expert call (task.pricing overrides, else the expert's own price table), and the cost
bound is enforced by tools.base.guarded_call before the call is made.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from orchestra.agent.parse import parse
from orchestra.schema import function_schema
from orchestra.types import Task, ToolCall, ToolContext, ToolResult
from tools.base import guarded_call
from tools.experts.base import bound_tokens
from tools.pricing import MTOK

TIER_PREFIX = "expert-"
_MESSAGE = re.compile(r"<message>(.*?)(?:</message>|$)", re.S)

EXPERT_INSTRUCTIONS = (
    "You are a customer service agent acting under the policy below. Decide the agent's next step.\n"
    "Think inside <think>...</think> if you need to. Then EITHER write the message for the user inside "
    "<message>...</message>, OR call tools with <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>. "
    "Never do both.\n\n<policy>\n{policy}\n</policy>\n\nTools:\n{tools}"
)


@dataclass
class AgentOutput:
    """What an agent turn says: a message for the user, tool calls, or a format error."""

    message: str | None = None
    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None


def split_agent_output(text: str) -> AgentOutput:
    """`<think>/<message>/<tool_call>` (or plain text as the message). Never raises."""
    parsed = parse(text, "text")
    if parsed.calls:
        return AgentOutput(calls=parsed.calls)
    if not parsed.ok:
        return AgentOutput(error=parsed.error)
    tagged = _MESSAGE.search(parsed.content)
    message = (tagged.group(1) if tagged else parsed.content).strip()
    return AgentOutput(message=message) if message else AgentOutput(error="empty reply: message the user or call a tool")


def _tier_key(tier: str) -> tuple[str, int]:
    head, _, num = tier.rpartition("-")
    return (head, int(num)) if num.isdigit() else (tier, 0)


class CallExpertTool:
    name = "call_expert"

    def __init__(self, experts: dict[str, Any], tiers: dict[str, str], sessions: Any, domain_tools: dict[str, Any],
                 max_tokens: int = 1024):
        self.experts, self.tiers, self.sessions = dict(experts), dict(tiers), sessions
        self.domain_tools = {k: v for k, v in domain_tools.items() if k != self.name}
        self.max_tokens = max_tokens
        self.description = ("Hand this turn to an expert model: it reads the conversation and either answers the "
                            "user or calls the domain tools for you.")
        self.parameters = {"type": "object", "properties": {"expert": {"type": "string"}},
                           "required": ["expert"], "additionalProperties": False}

    # ---- tiers and prices
    def _mapping(self, task: Task | None) -> dict[str, str]:
        mapping = (task.model_mapping if task is not None and task.model_mapping else None) or self.tiers
        return {t: e for t, e in mapping.items() if t.startswith(TIER_PREFIX)}

    def resolve(self, tier: Any, task: Task | None) -> tuple[str, Any]:
        mapping = self._mapping(task)
        if tier not in mapping:
            raise ValueError(f"expert {tier!r} is not a tier; choose one of {sorted(mapping, key=_tier_key)}")
        expert = self.experts.get(mapping[tier])
        if expert is None:
            raise ValueError(f"tier {tier} maps to expert {mapping[tier]!r}, which this zoo does not have")
        return tier, expert

    def _price(self, expert: Any, task: Task | None) -> tuple[float, float] | None:
        override = (task.pricing or {}).get(expert.name) if task is not None else None
        return (float(override.get("input", 0.0)), float(override.get("output", 0.0))) if override else None

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        tiers = sorted(self._mapping(task), key=_tier_key)
        lines = []
        for tier in tiers:
            try:
                _, expert = self.resolve(tier, task)
                p_in, p_out = self._price(expert, task) or expert.price()
                lines.append(f"{tier}: ${p_in:g} in / ${p_out:g} out per M tokens, ~{expert.latency_s:g}s")
            except Exception as e:
                lines.append(f"{tier}: unavailable ({e})")
        params = {**self.parameters, "properties": {"expert": {"type": "string", "enum": tiers,
                                                               "description": "tier id of the expert"}}}
        return function_schema(self.name, self.description + " Tiers:\n" + "\n".join(lines), params)

    # ---- the prompt the expert sees
    def messages(self, ctx: ToolContext) -> list[dict[str, str]]:
        session = self.sessions.get(ctx.episode_id, ctx.task)
        tools = "\n".join(json.dumps(t.schema(ctx.task)["function"]) for t in self.domain_tools.values())
        system = EXPERT_INSTRUCTIONS.format(policy=session.domain.policy, tools=tools)
        out = [{"role": "system", "content": system}]
        for m in session.messages:
            if m.role == "tool":
                out.append({"role": "user", "content": f"<tool_response>{m.content}</tool_response>"})
            elif m.role == "assistant" and m.tool_calls:
                calls = "".join(f'<tool_call>{json.dumps({"name": c.name, "arguments": c.arguments})}</tool_call>'
                                for c in m.tool_calls)
                out.append({"role": "assistant", "content": calls})
            elif m.content:
                out.append({"role": m.role, "content": m.content})
        return out

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        _, expert = self.resolve(args.get("expert"), ctx.task)
        n_in = bound_tokens(self.messages(ctx))
        price = self._price(expert, ctx.task)
        if price:
            return (n_in * price[0] + self.max_tokens * price[1]) / MTOK
        return float(expert.cost_bound(n_in, self.max_tokens))

    # ---- the call
    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            tier, expert = self.resolve(args.get("expert"), ctx.task)
        except ValueError as e:
            return ToolResult.failure(f"{self.name}: {e}", meta={"invalid_arguments": True})
        reply = await expert.complete(self.messages(ctx), self.max_tokens, ctx, purpose="answer")
        price = self._price(expert, ctx.task)
        cost = (reply.tokens_in * price[0] + reply.tokens_out * price[1]) / MTOK if price else reply.cost_usd
        base = dict(cost_usd=cost, latency_s=reply.latency_s, tokens_in=reply.tokens_in, tokens_out=reply.tokens_out)
        meta: dict[str, Any] = {"model": expert.name, "tier": tier, "expert_text": reply.text}
        if not reply.ok:
            return ToolResult.failure(f"{self.name}: {reply.error}", meta=meta, **base)
        out = split_agent_output(reply.text)
        if out.error:
            return ToolResult.failure(f"{self.name}: the expert's reply was unusable: {out.error}", meta=meta, **base)
        if out.message is not None:
            return ToolResult(f"Expert {tier} told the user: {out.message}", meta=meta, message=out.message, **base)
        lines, start = [], time.perf_counter()
        for call in out.calls:
            tool = self.domain_tools.get(call.name)
            if tool is None:
                lines.append(f"{call.name}: Error: unknown tool")
                continue
            res = await guarded_call(tool, call.arguments, ctx)
            lines.append(f"{call.name}({json.dumps(call.arguments)}) -> {res.text}")
        meta["expert_calls"] = [c.to_dict() for c in out.calls]
        base["latency_s"] += time.perf_counter() - start
        return ToolResult(f"Expert {tier} called tools:\n" + "\n".join(lines), meta=meta, **base)
