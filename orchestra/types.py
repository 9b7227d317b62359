"""The contracts every part of Orchestra speaks: Task, Message, ToolCall, ToolResult, Turn, Trajectory.

Plain dataclasses with `to_dict` / `from_dict`, so they cross Ray, JSONL and verl's parquet unchanged;
TrainSample is what a finished episode becomes for a learner (orchestra.agent.loop.episode_samples).
Nothing here knows about engines, Ray or tools; see DESIGN.md ("Contracts") for the meaning of each field.

The preference vector P is a plain `dict[str, float]` over features `accuracy`, `cost`, `latency` and
`tool:<id>`; its type and `check_preference` live on the floor below, in orchestra/preferences.py, and are
re-exported here because every contract that carries one names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestra.preferences import BASE_FEATURES, Preference, check_preference  # noqa: F401  re-exported

# Gymnasium's split: answered = terminated; out of turns, out of context room or over budget = truncated;
# error = failed. Trajectory refuses any other value.
TERMINATIONS = ("answered", "max_turns", "context", "budget", "error")
TRUNCATIONS = ("max_turns", "context", "budget")


def _from_dict(cls, data: dict[str, Any]):
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")
    return cls(**data)


@dataclass
class Task:
    """One problem with its gold answer, tool catalogue, model mapping, price overrides and preference."""

    id: str
    problem: str
    answer: str
    category: str = "qa"  # qa | func_call
    data_source: str = "synthetic"
    tools: list[str] = field(default_factory=list)
    model_mapping: dict[str, str] = field(default_factory=dict)  # tool id (tier) -> expert name
    pricing: dict[str, dict[str, float]] = field(default_factory=dict)  # expert -> {input, output} $/Mtok
    pref: Preference = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # family, difficulty, allowed doc ids, ...

    def __post_init__(self):
        if self.category not in ("qa", "func_call"):
            raise ValueError(f"Task {self.id}: category must be 'qa' or 'func_call', got {self.category!r}")
        self.pref = check_preference(self.pref)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Task:
        return _from_dict(cls, data)


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def tool_id(self) -> str:
        """The id used for tool counts and `tool:<id>` preferences: the tier for model-backed tools."""
        model = self.arguments.get("model") if isinstance(self.arguments, dict) else None
        return model if isinstance(model, str) and model else self.name


@dataclass
class Message:
    role: str  # system | user | assistant | tool
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    name: str = ""  # tool name for role=tool

    def to_chat(self) -> dict[str, Any]:
        """The dict shape chat templates (and the OpenAI API) expect."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"type": "function", "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.name:
            out["name"] = self.name
        return out


# Typed signals of a ToolResult and the meta key each is also shown under (traces, records, older records).
SIGNAL_KEYS = {"answer": "answer", "documents": "documents", "code_output": "code_output",
               "refused": "budget_refused", "retryable": "retryable", "message": "agent_message",
               "candidate": "candidate"}


@dataclass
class ToolResult:
    """What a tool call returns. Errors and timeouts are returned here, never raised.

    The typed fields after `meta` are the signals an episode and the tool server act on; `meta` holds free-form
    facts for display (expert model, doc ids, `estimated`, `queue_s`, `cached`, ...) and a copy of the signals
    that are set, under SIGNAL_KEYS. The stored form (`to_dict`: records, JSON) carries the signals in meta
    only, as records always have; a result built from it, or from a tool that reports a signal only in meta,
    has the signal read into its field on construction."""

    text: str
    cost_usd: float = 0.0
    latency_s: float = 0.0  # service time, not queueing
    tokens_in: int = 0
    tokens_out: int = 0
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    answer: str | None = None  # the final answer: the episode ends, answered
    documents: list[str] | None = None  # retrieved passages (a search's result, also when none were found)
    code_output: str | None = None  # what executed code printed
    refused: bool = False  # a budget refusal: the call was not made, and the episode ends (budget)
    retryable: bool | None = None  # a transient failure the tool server may retry (None: the tool did not say)
    message: str | None = None  # τ²'s call_expert: words said to the user as the agent's turn
    candidate: str | None = None  # an expert's extracted answer, shown; the episode goes on (`consult`)

    def __post_init__(self):
        for attr, key in SIGNAL_KEYS.items():
            value = getattr(self, attr)
            if value is None or (attr == "refused" and not value):  # unset: a signal reported in meta only
                if self.meta.get(key) is not None:
                    setattr(self, attr, self.meta[key])
            else:
                self.meta.setdefault(key, value)

    @property
    def ok(self) -> bool:
        return self.error is None

    @classmethod
    def failure(cls, message: str, **kw) -> ToolResult:
        return cls(text=f"Error: {message}", error=message, **kw)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for attr in SIGNAL_KEYS:  # stored in meta (see the class docstring)
            del out[attr]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResult:
        return _from_dict(cls, data)


@dataclass
class ToolRecord:
    """One executed (or refused) tool call inside an episode, for accounting and traces."""

    turn: int
    name: str
    tool_id: str
    arguments: dict[str, Any]
    result: ToolResult

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "name": self.name, "tool_id": self.tool_id, "arguments": self.arguments,
                "result": self.result.to_dict()}


@dataclass
class ToolContext:
    """What a tool may know about the episode calling it. Sim experts read the task's family, difficulty
    and gold answer (they are simulations, labelled as such); real tools use only problem and context."""

    task: Task
    episode_id: str = ""
    turn: int = 0
    attempt: int = 0  # earlier calls of the same tool id in this episode
    documents: list[str] = field(default_factory=list)  # retrieved so far
    code_outputs: list[str] = field(default_factory=list)
    budget_usd_left: float | None = None  # a call whose cost bound exceeds this is refused, not made
    seed: int = 0
    # an expert's reply text as it arrives (OpenAI-compatible experts; Serve's router mode relays it to the
    # client's SSE stream). In-process only: a callback does not cross to tool-server actors.
    on_delta: Callable[[str], None] | None = field(default=None, repr=False, compare=False)


@dataclass
class Turn:
    """One generate call. In transcript mode `prompt_ids` is the whole context the model saw."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    tool_calls: list[ToolCall] = field(default_factory=list)
    format_ok: bool = True
    text: str = ""
    finish_reason: str = "stop"
    gen_latency_s: float = 0.0
    policy_version: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Trajectory:
    """One episode: its turns, the answer it gave, and what it cost."""

    task_id: str
    uid: str  # group key: all G episodes of one task in one step share it
    turns: list[Turn] = field(default_factory=list)
    answer: str | None = None
    correct: bool | None = None  # filled by the reward side
    cost_usd: float = 0.0  # tools + experts (+ orchestrator tokens once accounted)
    latency_s: float = 0.0  # sum of tool service times
    tool_counts: dict[str, int] = field(default_factory=dict)  # tool id -> turns whose first call used it
    termination: str = "error"  # one of TERMINATIONS (checked on every assignment)
    context_mode: str = "reprompt"
    tool_records: list[ToolRecord] = field(default_factory=list)
    gen_latency_s: float = 0.0
    error: str | None = None
    episode_id: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "termination" and value not in TERMINATIONS:
            raise ValueError(f"termination must be one of {TERMINATIONS}, got {value!r}")
        super().__setattr__(name, value)

    @property
    def terminated(self) -> bool:
        return self.termination == "answered"

    @property
    def truncated(self) -> bool:
        return self.termination in TRUNCATIONS

    @property
    def policy_tokens(self) -> tuple[int, int]:
        """(prompt tokens, generated tokens) the orchestrator itself processed."""
        return sum(len(t.prompt_ids) for t in self.turns), sum(len(t.response_ids) for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["tool_records"] = [r.to_dict() for r in self.tool_records]  # results in their stored form
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        turns = [Turn(**{**t, "tool_calls": [ToolCall(**c) for c in t.get("tool_calls", [])]})
                 for t in data.pop("turns", [])]
        records = [ToolRecord(**{**r, "result": ToolResult.from_dict(r["result"])})
                   for r in data.pop("tool_records", [])]
        return cls(turns=turns, tool_records=records, **data)


@dataclass
class TrainSample:
    """One training sample, what every learner consumes (the local learner, verl's AgentLoopOutput): one turn
    (reprompt) or one episode (transcript, tool tokens masked) with its episode's advantage.
    response_mask: 1 = model token (in the loss), 0 = tool/observation token; an SFT demonstration's note may weigh
    more (sft.note_weight: SFT's loss is the mask-weighted token mean; RL samples hold 0 and 1 only). Pickles as it
    is (Ray)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[float]
    logprobs: list[float]  # rollout engine's logprobs of response_ids (0.0 where mask is 0)
    advantage: float = 0.0
    turn: int = 0
    episode_id: str = ""
    uid: str = ""  # the task's group id

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        if len(self.response_mask) != n or len(self.logprobs) != n:
            raise ValueError(f"TrainSample: response_ids ({n}), response_mask ({len(self.response_mask)}) and "
                             f"logprobs ({len(self.logprobs)}) must have the same length")
        if not self.prompt_ids:
            raise ValueError("TrainSample: prompt_ids is empty (the first response token needs a context)")


@dataclass
class Judgement:
    """A judge's verdict on one answer (reward/judges.py makes them; τ² assertions too)."""

    correct: bool
    score: float  # 1/0 for most judges; the F1 for `f1`
    judge: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
