"""The τ² episode driver: a three-party conversation (orchestrator as agent, simulated user, environment).

orchestra.agent.loop.AgentLoop ends an episode at the first plain-text reply; in τ² a plain-text reply is a
message to the user, whose answer is the next user turn, until the user (or agent) says stop. This driver
runs that loop in `transcript` mode with the same pieces as AgentLoop (Engine, Prompter, parse, ToolClient,
Turn/Trajectory) and the same token discipline: one token sequence, the model's tokens never re-tokenized,
each new observation / user message appended as a template delta, so `agent_loop.episode_samples` turns the
trajectory into one masked training sample (user and tool tokens masked out).

It follows tau2's orchestrator: the agent greets first ("Hi! How can I help you today?"), tool calls run on
the episode's own environment (tools/tau2/adapter.py), a `call_expert` reply that is a message goes to
the user as the agent's turn, `###STOP###` in an agent message is an agent stop, the user's stop signals end
the episode (user stop), and too many tool errors or steps end it prematurely (tau2 scores those 0).
Terminations: user/agent stop -> `answered`; out of turns/steps/too many errors -> `max_turns`; no context room
left for a reply -> `context` (τ² calls it max_steps); $/seconds budget -> `budget` (the same check as the agent
loop's, orchestra/agent/budget.py); engine or user-simulator failure -> `error`. `traj.meta["tau2_termination"]` keeps
tau2's own name. With `score=True` the official evaluator scores the episode here (tools/tau2/reward.py)
and `traj.correct` / `traj.meta["tau2_score"]` are set; the τ² transcript is kept in `meta["tau2_messages"]`.
The domain tools must run in this process (tools.base.LocalToolClient over adapter.domain_tools with the same
`sessions`): they are cheap in-memory functions, and the session they write is the one scored here.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

from orchestra.agent.budget import EpisodeBudget
from orchestra.agent.prompt import preference_text
from orchestra.agent.tool_step import call_tool
from orchestra.engine import Sampling
from orchestra.types import Task, ToolCall, ToolResult, Trajectory, Turn
from tools.tau2.call_expert import split_agent_output

GREETING = "Hi! How can I help you today?"
AGENT_STOP = "###STOP###"
AGENT_INSTRUCTIONS = (
    "You are a customer service agent helping a user under the policy below. Each turn, either send one "
    "message to the user (plain text, or inside <message>...</message>) or call tools with <tool_call>, never "
    "both. You may think first inside <think>...</think>. Follow the policy; produce valid JSON in tool calls."
)
_TERMINATION = {"user_stop": "answered", "agent_stop": "answered", "max_steps": "max_turns",
                "too_many_errors": "max_turns", "budget": "budget", "agent_error": "error", "user_error": "error"}


def tool_id(call: ToolCall) -> str:
    """call_expert is counted by tier (its `expert` argument), like the `model` tier of other expert tools."""
    expert = call.arguments.get("expert") if isinstance(call.arguments, dict) else None
    return expert if call.name == "call_expert" and isinstance(expert, str) and expert else call.tool_id


class Tau2EpisodeDriver:
    def __init__(self, engine: Any, tools: Any, prompter: Any, sessions: Any, user: Any, *, max_turns: int = 30,
                 max_errors: int = 10, max_calls_per_turn: int = 1, max_context_tokens: int = 16384,
                 budget_usd: float | None = None, budget_seconds: float | None = None,
                 eos_token_ids: list[int] | None = None, score: bool = True, nl_judge: str | None = None,
                 nl_judge_args: dict[str, Any] | None = None):
        self.engine, self.tools, self.prompter, self.sessions, self.user = engine, tools, prompter, sessions, user
        self.max_turns, self.max_errors, self.max_calls_per_turn = max_turns, max_errors, max_calls_per_turn
        self.max_context_tokens = max_context_tokens
        self.budget_usd, self.budget_seconds = budget_usd, budget_seconds
        self.eos = set(eos_token_ids or [])
        self.score, self.judge = score, {"nl_judge": nl_judge, "nl_judge_args": nl_judge_args}

    @classmethod
    def for_domain(cls, domain: str, engine: Any, prompter: Any, user: Any, *, experts: dict[str, Any] | None = None,
                   tiers: dict[str, str] | None = None, expert_max_tokens: int = 1024,
                   **limits: Any) -> Tau2EpisodeDriver:
        """A driver over `domain`'s tools, run in this process (`transfer_to_human_agents` swapped for
        `call_expert` over `experts` when given) with its own session store; `limits` are the constructor's."""
        from tools.base import LocalToolClient
        from tools.tau2.adapter import Tau2Sessions, domain_tools
        from tools.tau2.domain import get_domain

        sessions = Tau2Sessions(get_domain(domain))
        tools = domain_tools(sessions.domain, sessions, experts=experts, tiers=tiers,
                             expert_max_tokens=expert_max_tokens)
        return cls(engine, LocalToolClient(tools), prompter, sessions, user, **limits)

    async def run(self, task: Task, sampling: Sampling, uid: str = "", episode_id: str = "",
                  policy_version: int = 0) -> Trajectory:
        episode_id = episode_id or uuid.uuid4().hex[:12]
        traj = Trajectory(task_id=task.id, uid=uid or task.id, episode_id=episode_id, context_mode="transcript",
                          termination="max_turns")
        state = _State(self, task, sampling, traj, policy_version)
        try:
            reason = await state.play()
        except Exception as e:  # an engine / template failure ends this episode only
            reason, traj.error = "agent_error", f"{type(e).__name__}: {e}"
        finally:
            await self.user.close(episode_id)
        traj.termination = "context" if traj.meta.get("context_exhausted") else _TERMINATION[reason]
        traj.meta["tau2_termination"] = reason
        traj.tool_counts = dict(state.first_ids)
        session = self.sessions.pop(episode_id)
        if session is not None:
            traj.meta["tau2_messages"] = [m.model_dump(mode="json") for m in session.messages]
            if self.score:
                from tools.tau2.reward import score_session

                result = score_session(session, reason, **self.judge)
                traj.correct = result.correct
                traj.meta["tau2_score"] = result.to_dict()
        return traj


class _State:
    """One running episode (kept off the driver so one driver runs many episodes concurrently)."""

    def __init__(self, d: Tau2EpisodeDriver, task: Task, sampling: Sampling, traj: Trajectory, version: int):
        self.d, self.task, self.sampling, self.traj, self.version = d, task, sampling, traj, version
        self.session = d.sessions.get(traj.episode_id, task)
        self.schemas = d.tools.schemas(task)
        self.names = {s.get("function", s).get("name", "") for s in self.schemas}
        self.attempts: Counter[str] = Counter()
        self.first_ids: Counter[str] = Counter()
        self.errors = 0
        self.budget = EpisodeBudget(d.budget_usd, d.budget_seconds)
        self.messages: list[dict[str, Any]] = []
        self.ids: list[int] = []

    def system(self) -> dict[str, Any]:
        text = (f"{AGENT_INSTRUCTIONS}\n<policy>\n{self.session.domain.policy}\n</policy>\n"
                f"{preference_text(self.task.pref)}")
        return {"role": "system", "content": text}

    async def say_to_user(self, text: str) -> tuple[str | None, str]:
        """Agent message -> user. Returns (termination reason or None, the user's reply)."""
        self.session.agent_says(text)
        self.traj.answer = text
        if AGENT_STOP in text:
            return "agent_stop", ""
        reply = await self.d.user.reply(self.traj.episode_id, text)
        self.traj.meta["user_cost_usd"] = self.traj.meta.get("user_cost_usd", 0.0) + float(reply.get("cost_usd") or 0)
        if reply.get("error"):
            self.traj.error = reply["error"]
            return "user_error", ""
        self.session.user_says(reply["text"])
        return ("user_stop" if reply.get("stop") else None), reply["text"]

    def over_budget(self) -> bool:
        return self.budget.exceeded(self.traj.cost_usd, self.traj.latency_s)

    async def play(self) -> str:
        await self.d.user.open(self.traj.episode_id, self.task.meta["tau2_task"])
        reason, first = await self.say_to_user(GREETING)
        self.traj.answer = None
        if reason:
            return reason
        self.messages = [self.system(), {"role": "assistant", "content": GREETING}, {"role": "user", "content": first}]
        self.ids = self.d.prompter.encode(self.messages, self.schemas)
        for turn_no in range(self.d.max_turns):
            if self.over_budget():
                return "budget"
            room = self.d.max_context_tokens - len(self.ids)
            if room < 8:
                self.traj.meta["context_exhausted"] = True
                return "max_steps"
            sampling = self.sampling
            if sampling.max_tokens > room:
                sampling = Sampling(**{**sampling.__dict__, "max_tokens": room})
            start = time.perf_counter()
            gen = await self.d.engine.generate(list(self.ids), sampling)
            gen_s = time.perf_counter() - start
            self.traj.gen_latency_s += gen_s
            text = self.d.prompter.decode(gen.token_ids)
            out = split_agent_output(text)
            turn = Turn(prompt_ids=list(self.ids), response_ids=list(gen.token_ids), logprobs=list(gen.logprobs),
                        tool_calls=out.calls[: self.d.max_calls_per_turn], format_ok=out.error is None, text=text,
                        finish_reason=gen.finish_reason, gen_latency_s=gen_s, policy_version=self.version)
            self.traj.turns.append(turn)
            new: list[dict[str, Any]] = []
            reason = None
            if out.error:
                new.append({"role": "tool", "content": f"Format error: {out.error}"})
            elif out.message is not None:
                reason, said = await self.say_to_user(out.message)
                new.append({"role": "user", "content": said})
            else:
                if len(out.calls) > self.d.max_calls_per_turn:
                    new.append({"role": "tool", "content": f"Note: only the first {self.d.max_calls_per_turn} "
                                                           "tool call(s) per turn are executed."})
                self.first_ids[tool_id(turn.tool_calls[0])] += 1
                for call in turn.tool_calls:
                    result = await self.call(call, turn_no)
                    new.append({"role": "tool", "content": self.d.prompter.observation(result.text)})
                    if result.refused:
                        return "budget"
                    if result.ok and result.message is not None:  # call_expert answered the user for us
                        reason, said = await self.say_to_user(str(result.message))
                        new.append({"role": "user", "content": said})
                    if reason:
                        break
            if reason:
                return reason
            if self.errors >= self.d.max_errors:
                return "too_many_errors"
            self.extend(turn, new)
        return "max_steps"

    async def call(self, call: ToolCall, turn_no: int) -> ToolResult:
        result = await call_tool(self.d.tools, call, task=self.task, traj=self.traj, turn=turn_no,
                                 names=sorted(self.names), attempts=self.attempts, budget=self.budget,
                                 tool_id=tool_id(call))
        self.errors += 0 if result.ok else 1
        return result

    def extend(self, turn: Turn, new: list[dict[str, Any]]) -> None:
        ids = turn.response_ids
        ended = bool(ids) and ids[-1] in self.d.eos
        p = self.d.prompter
        content = p.decode(ids[:-1] if ended else ids)
        emitted = p.decode(ids[-1:]) if ended else ""
        new = new or [{"role": "tool", "content": "(no output)"}]
        delta = p.delta_ids(self.messages + [{"role": "assistant", "content": content}], new, self.schemas, emitted)
        self.messages += [{"role": "assistant", "content": content}] + new
        self.ids = turn.prompt_ids + ids + delta
