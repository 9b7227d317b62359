"""The orchestrator's multi-turn tool loop: one episode = turns of generate -> parse -> tool calls -> observations.

The same loop runs in training rollout workers, the Serve endpoint and inside verl: the engine and the
ToolClient are injected (in-process tools, Ray tool-server actors, or verl's LLM server client).
An episode ends when the `answer` tool returns an answer, when `submit(model)` adopts what a `consult` of that
tier answered (orchestra/agent/consults.py), or, in answer_mode=text, when the model replies without a tool call
-> `answered` (terminated); when turns run out -> `max_turns`; when the context has no room left for a reply ->
`context`; when a $ / seconds / turns budget is hit or a call would exceed it ->
`budget` (truncated); on an engine failure -> `error`. The loop acts on ToolResult's typed signals (answer,
documents, code_output, refused), never on its free-form meta.
Model garbage never ends an episode: it becomes a parse-error observation for the next turn.
Repeat guard (`repeat_guard`; on for serving, conf/serve.yaml; off in training, whose reward should see a policy
that loops so RL learns not to): a call the episode already made (same tool and arguments; `answer` excepted) is
not run again but recorded at $0 with meta `repeat_of_turn` and counted in meta["repeats_skipped"]; the next
prompt ends with the opening of an `answer` call, so the policy still picks the tier (its trade-off under the
preference), not the tool. With no answer tool (answer_mode=text) the observation asks for the answer instead.

Context modes (see orchestra/agent/prompt.py): `reprompt` renders a fresh prompt per turn (each turn is its own
training sample); `transcript` keeps one token sequence and appends observation deltas (masked from the loss).
Cost here is what tools and experts charged; the orchestrator's own tokens are priced by reward/cost.py.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from typing import Any, Protocol

from orchestra.agent.budget import EpisodeBudget
from orchestra.agent.consults import SUBMIT_TOOL, Consults
from orchestra.agent.parse import parse
from orchestra.agent.prompt import Prompter
from orchestra.agent.tool_step import call_tool
from orchestra.engine import Engine, Sampling
from orchestra.types import Task, ToolCall, ToolContext, ToolRecord, ToolResult, TrainSample, Trajectory, Turn


class ToolClient(Protocol):
    """How the loop reaches tools: in-process (tools.base.LocalToolClient), Ray actors, or verl."""

    def schemas(self, task: Task) -> list[dict[str, Any]]: ...
    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult: ...


ANSWER_TOOL = "answer"
REPEAT_SKIPPED = "not run again"  # in a skipped repeat's error: clients (cluster/demo.py) tell the skip by it


def _tool_names(schemas: list[dict[str, Any]]) -> list[str]:
    return [s.get("function", s).get("name", "") for s in schemas]


def forced_answer_prefix(schemas: list[dict[str, Any]]) -> str:
    """The opening of an answer-tool call, written as the SFT demonstrations write calls
    (orchestra/agent/scripted.call_text), up to where the policy's own choice begins: within the tier id, after
    what all the offered answer tiers share ("answer-"), so the policy picks among answer tiers only (left at the
    opening quote, it once wrote a search tier there)."""
    for s in schemas:
        fn = s.get("function", s)
        if fn.get("name") == ANSWER_TOOL:
            head = f'<tool_call>{{"name": "{ANSWER_TOOL}", "arguments": {{'
            model = fn.get("parameters", {}).get("properties", {}).get("model")
            if model is None:
                return head
            return head + '"model": "' + os.path.commonprefix([str(t) for t in model.get("enum") or [""]])
    return ""


def _call_key(call: ToolCall) -> str:
    return call.name + json.dumps(call.arguments, sort_keys=True, default=str)


class AgentLoop:
    def __init__(self, engine: Engine, tools: ToolClient, prompter: Prompter, *, context_mode: str = "reprompt",
                 answer_mode: str = "tool", max_turns: int = 4, max_calls_per_turn: int = 1,
                 max_context_tokens: int = 3072, budget_usd: float | None = None,
                 budget_seconds: float | None = None, budget_turns: int | None = None,
                 count_generation_latency: bool = False, eos_token_ids: list[int] | None = None,
                 repeat_guard: bool = False):
        if context_mode not in ("reprompt", "transcript"):
            raise ValueError(f"context_mode must be reprompt or transcript, got {context_mode!r}")
        self.engine, self.tools, self.prompter = engine, tools, prompter
        self.context_mode, self.answer_mode = context_mode, answer_mode
        self.max_turns, self.max_calls_per_turn = max_turns, max_calls_per_turn
        self.max_context_tokens = max_context_tokens
        self.budget_usd, self.budget_seconds, self.budget_turns = budget_usd, budget_seconds, budget_turns
        self.count_generation_latency = count_generation_latency
        self.eos_token_ids = set(eos_token_ids or [])
        self.repeat_guard = repeat_guard

    @classmethod
    def from_config(cls, agent_cfg: Any, engine: Engine, tools: ToolClient, prompter: Prompter,
                    eos_token_ids: list[int] | None = None, **overrides: Any) -> AgentLoop:
        """The loop an experiment's `agent` section describes (AgentConfig.loop_kwargs); `overrides` replace
        single settings where the caller knows better (the verl plugin's context length)."""
        return cls(engine, tools, prompter, eos_token_ids=eos_token_ids, **{**agent_cfg.loop_kwargs(), **overrides})

    async def run(self, task: Task, sampling: Sampling, uid: str = "", episode_id: str = "",
                  policy_version: int = 0, budget_usd: float | None = None, budget_seconds: float | None = None,
                  budget_turns: int | None = None, on_step: Any = None) -> Trajectory:
        """Run one episode. Per-call budget arguments override the loop's defaults (Serve requests).
        `on_step(kind, payload)` (optional, sync) is told about each tool call, observation and answer."""
        uid, episode_id = uid or task.id, episode_id or uuid.uuid4().hex[:12]
        try:  # building the episode fetches tool schemas, which can fail (a tool server restarting)
            ep = _Episode(self, task, sampling, uid, episode_id, policy_version,
                          budget_usd if budget_usd is not None else self.budget_usd,
                          budget_seconds if budget_seconds is not None else self.budget_seconds,
                          budget_turns if budget_turns is not None else self.budget_turns, on_step)
        except Exception as e:
            return Trajectory(task_id=task.id, uid=uid, episode_id=episode_id, context_mode=self.context_mode,
                              termination="error", error=f"tool catalogue unavailable: {type(e).__name__}: {e}")
        try:
            await ep.play()
        except Exception as e:  # an engine or template failure ends this episode only
            ep.traj.termination, ep.traj.error = "error", f"{type(e).__name__}: {e}"
        return ep.finish()


class _Episode:
    """State of one running episode (kept off AgentLoop so one loop runs many episodes concurrently)."""

    def __init__(self, loop: AgentLoop, task: Task, sampling: Sampling, uid: str, episode_id: str,
                 version: int, usd: float | None, seconds: float | None, turns: int | None, on_step: Any):
        self.loop, self.task, self.sampling, self.version, self.on_step = loop, task, sampling, version, on_step
        self.budget = EpisodeBudget(usd, seconds)
        self.turn_cap = min(loop.max_turns, turns) if turns is not None else loop.max_turns
        self.traj = Trajectory(task_id=task.id, uid=uid, episode_id=episode_id, context_mode=loop.context_mode,
                               termination="max_turns")
        self.schemas = loop.tools.schemas(task)
        self.names = _tool_names(self.schemas)
        self.documents: list[str] = []
        self.code_outputs: list[str] = []
        self.attempts: list[str] = []
        self.consults = Consults()  # the answers consulted experts gave (orchestra/agent/consults.py)
        self.messages: list[dict[str, Any]] = []
        self.ids: list[int] = []  # transcript mode: the whole token sequence so far
        self.attempt_counts: Counter[str] = Counter()
        self.first_ids: Counter[str] = Counter()
        self.made: dict[str, int] = {}  # repeat guard: each call made (its key) -> the turn it was made in
        self.forcing = ""  # the answer-call opening that ends the next turn's prompt ("" when not forcing)

    def _emit(self, kind: str, payload: dict[str, Any]) -> None:
        if self.on_step is not None:
            try:
                self.on_step(kind, payload)
            except Exception:  # a listener (e.g. a closed stream) must not break the episode
                self.on_step = None

    def _seconds_spent(self) -> float:
        extra = self.traj.gen_latency_s if self.loop.count_generation_latency else 0.0
        return self.traj.latency_s + extra

    def _over_budget(self) -> bool:
        return self.budget.exceeded(self.traj.cost_usd, self._seconds_spent())

    def _prompt_ids(self) -> list[int]:
        p = self.loop.prompter
        if self.loop.context_mode == "reprompt":
            msgs = [p.system(self.task), p.reprompt_user(self.task, self.documents, self.code_outputs, self.attempts,
                                                         self.consults.view())]
            return p.encode(msgs, self.schemas)
        if not self.ids:
            self.messages = p.first_messages(self.task)
            self.ids = p.encode(self.messages, self.schemas)
        return list(self.ids)

    async def play(self) -> None:
        for turn_no in range(self.turn_cap):
            if self._over_budget():
                self.traj.termination = "budget"
                return
            prompt_ids, forced = self._prompt_ids(), self.forcing
            if forced:  # the repeat guard's forced answer: the policy writes the rest of the call
                prompt_ids += self.loop.prompter.tok.encode(forced, add_special_tokens=False)
                self.forcing = ""
            room = self.loop.max_context_tokens - len(prompt_ids)
            if room < 8:
                self.traj.termination = "context"  # out of room to act
                self.traj.meta["context_exhausted"] = True
                return
            sampling = self.sampling
            if sampling.seed is not None and turn_no:
                # a seeded episode: each turn draws from its own stream (one seed for every turn would replay the
                # same random numbers at every turn, so choices across turns would be correlated, not sampled)
                sampling = Sampling(**{**sampling.__dict__, "seed": sampling.seed * 1_000_003 + turn_no})
            if sampling.max_tokens > room:
                sampling = Sampling(**{**sampling.__dict__, "max_tokens": room})
            start = time.perf_counter()
            gen = await self.loop.engine.generate(prompt_ids, sampling)
            gen_s = time.perf_counter() - start
            self.traj.gen_latency_s += gen_s
            text = forced + self.loop.prompter.decode(gen.token_ids)
            parsed = parse(text, self.loop.answer_mode)
            turn = Turn(prompt_ids=prompt_ids, response_ids=list(gen.token_ids), logprobs=list(gen.logprobs),
                        tool_calls=parsed.calls[: self.loop.max_calls_per_turn], format_ok=parsed.ok,
                        text=text, finish_reason=gen.finish_reason, gen_latency_s=gen_s,
                        policy_version=self.version)
            self.traj.turns.append(turn)
            observations: list[str] = []
            if parsed.answer is not None and not parsed.calls:
                self._answer(parsed.answer, turn_no)
                return
            if not parsed.ok:
                observations.append(f"Format error: {parsed.error}")
                self.attempts.append(f"turn {turn_no + 1}: format error: {parsed.error}")
                self._emit("error", {"turn": turn_no, "message": parsed.error})
            else:
                if len(parsed.calls) > self.loop.max_calls_per_turn:
                    observations.append(f"Note: only the first {self.loop.max_calls_per_turn} tool call(s) per "
                                        f"turn are executed; {len(parsed.calls) - len(turn.tool_calls)} ignored.")
                first = turn.tool_calls[0]
                if self._repeat_of(first) is None and not self._submits(first):  # neither uses a tool
                    self.first_ids[first.tool_id] += 1
                for call in turn.tool_calls:
                    if self._submits(call):
                        text, answered = self._submit(call, turn_no)
                        observations.append(self.loop.prompter.observation(text))
                        if answered:
                            return
                        continue
                    earlier = self._repeat_of(call)
                    if earlier is not None:
                        observations.append(self._skip_repeat(call, turn_no, earlier))
                        continue
                    result = await self._call(call, turn_no)
                    observations.append(self.loop.prompter.observation(result.text))
                    if result.refused:
                        self.traj.termination = "budget"
                        return
                    if result.ok and result.answer is not None:
                        self._answer(str(result.answer), turn_no)
                        return
                    if self._over_budget():
                        self.traj.termination = "budget"
                        return
            if self.loop.context_mode == "transcript":
                self._extend_transcript(turn, observations, forced)

    def _repeat_of(self, call: ToolCall) -> int | None:
        """The turn that already made this call, when the repeat guard is on and it is not an answer call."""
        if not self.loop.repeat_guard or call.name == ANSWER_TOOL:
            return None
        return self.made.get(_call_key(call))

    def _skip_repeat(self, call: ToolCall, turn_no: int, earlier: int) -> str:
        """Record a repeated call without running it ($0, flagged) and force an answer next; the observation."""
        prefix = forced_answer_prefix(self.schemas)
        then = "the answer tool is called next" if prefix else "give the final answer now"
        args = json.dumps(call.arguments, sort_keys=True, default=str)
        msg = f"{call.name}({args}) repeats an earlier call; {REPEAT_SKIPPED} (its result is known); {then}"
        self._emit("tool_call", {"turn": turn_no, "name": call.name, "arguments": call.arguments})
        result = ToolResult.failure(msg, meta={"repeat_of_turn": earlier})
        self.traj.tool_records.append(ToolRecord(turn=turn_no, name=call.name, tool_id=call.tool_id,
                                                 arguments=call.arguments, result=result))
        self.traj.meta["repeats_skipped"] = self.traj.meta.get("repeats_skipped", 0) + 1
        self.attempts.append(f"turn {turn_no + 1}: {call.name}({call.tool_id}) repeated; not run again")
        self._emit("observation", {"turn": turn_no, "name": call.name, "text": result.text, "cost_usd": 0.0,
                                   "latency_s": 0.0, "error": result.error})
        self.forcing = prefix
        return self.loop.prompter.observation(result.text)

    def _submits(self, call: ToolCall) -> bool:
        return call.name == SUBMIT_TOOL and SUBMIT_TOOL in self.names

    def _submit(self, call: ToolCall, turn_no: int) -> tuple[str, bool]:
        """Adopt a consulted tier's answer ($0, no tool called): (observation, whether the episode is answered)."""
        self._emit("tool_call", {"turn": turn_no, "name": call.name, "arguments": call.arguments})
        record = self.consults.submit(call, turn_no)
        result = record.result
        self.traj.tool_records.append(record)
        self._emit("observation", {"turn": turn_no, "name": call.name, "text": result.text, "cost_usd": 0.0,
                                   "latency_s": 0.0, "error": result.error})
        if not result.ok:
            self.attempts.append(f"turn {turn_no + 1}: {call.name}({call.tool_id}) -> {result.text}")
            return result.text, False
        self._answer(str(result.answer), turn_no)
        return result.text, True

    def _answer(self, answer: str, turn_no: int) -> None:
        self.traj.answer, self.traj.termination = answer, "answered"
        self._emit("answer", {"turn": turn_no, "answer": answer})

    async def _call(self, call: ToolCall, turn_no: int) -> ToolResult:
        self._emit("tool_call", {"turn": turn_no, "name": call.name, "arguments": call.arguments})
        self.made.setdefault(_call_key(call), turn_no)
        result = await call_tool(self.loop.tools, call, task=self.task, traj=self.traj, turn=turn_no,
                                 names=self.names, attempts=self.attempt_counts, budget=self.budget,
                                 documents=self.documents, code_outputs=self.code_outputs)
        docs = result.documents or []
        self.documents.extend(str(d) for d in docs)
        if result.code_output is not None:
            self.code_outputs.append(str(result.code_output))
        consulted = self.consults.note(self.traj.tool_records[-1])  # shown in a section of its own, not as an attempt
        if not consulted and not docs and result.code_output is None and result.answer is None:
            self.attempts.append(f"turn {turn_no + 1}: {call.name}({call.tool_id}) -> {result.text}")
        self._emit("observation", {"turn": turn_no, "name": call.name, "text": result.text[:500],
                                   "cost_usd": result.cost_usd, "latency_s": result.latency_s,
                                   "error": result.error})
        return result

    def _extend_transcript(self, turn: Turn, observations: list[str], forced: str = "") -> None:
        ids = turn.response_ids
        ended = bool(ids) and ids[-1] in self.loop.eos_token_ids
        content_ids = ids[:-1] if ended else ids
        content = forced + self.loop.prompter.decode(content_ids)  # a forced opening is in the prompt ids
        emitted = self.loop.prompter.decode(ids[-1:]) if ended else ""
        new = [{"role": "tool", "content": o} for o in observations] or [{"role": "tool", "content": "(no output)"}]
        delta = self.loop.prompter.delta_ids(self.messages + [{"role": "assistant", "content": content}], new,
                                             self.schemas, emitted)
        self.messages += [{"role": "assistant", "content": content}] + new
        self.ids = turn.prompt_ids + ids + delta

    def finish(self) -> Trajectory:
        self.traj.tool_counts = dict(self.first_ids)
        release = getattr(self.loop.engine, "release", None)  # engines that keep per-episode KV caches
        if release is not None and self.traj.turns:
            last = self.traj.turns[-1]
            release(last.prompt_ids + last.response_ids)
        self.traj.meta.setdefault("documents", len(self.documents))
        return self.traj


def episode_samples(traj: Trajectory) -> list[TrainSample]:
    """The learner's samples of an episode (advantage 0: the reward side sets it): reprompt, one per turn;
    transcript, one, observation tokens masked out (mask 0)."""
    turns = traj.turns
    if not turns:
        return []
    if traj.context_mode == "reprompt":
        return [TrainSample(t.prompt_ids, t.response_ids, [1] * len(t.response_ids), t.logprobs, turn=i,
                            episode_id=traj.episode_id, uid=traj.uid) for i, t in enumerate(turns)]
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for i, t in enumerate(turns):
        response += t.response_ids
        mask += [1] * len(t.response_ids)
        logprobs += t.logprobs
        if i + 1 < len(turns):
            obs = turns[i + 1].prompt_ids[len(t.prompt_ids) + len(t.response_ids):]
            response += obs
            mask += [0] * len(obs)
            logprobs += [0.0] * len(obs)
    return [TrainSample(turns[0].prompt_ids, response, mask, logprobs, turn=0, episode_id=traj.episode_id,
                        uid=traj.uid)]
