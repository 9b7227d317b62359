"""The Serve endpoint's wire format: settings, request schemas and validation, API keys, and the
OpenAI-shaped response / SSE chunk builders. Pure Python (pydantic), no Ray and no engine, so it is unit
tested without a cluster.

Requests follow OpenAI's chat-completions schema plus two Orchestra extensions, `preference` (a preset name,
`accuracy=1,cost=0.5` text, or a weight dict) and `budget` ({usd, seconds, turns}). Unknown top-level fields
are ignored, as vLLM's server does, so stock OpenAI clients work. Every problem with a request becomes an
`ApiError` (4xx with OpenAI's error body naming the field); the app (actors/serve/http.py) turns it into a
response. Running the agent loop and the HTTP plumbing are left to app.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestra.types import Preference, Trajectory


class ApiError(Exception):
    """A request the server refuses (4xx: bad input) or could not serve (500: the engine failed)."""

    def __init__(self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.status}}


# ---------------------------------------------------------------- settings (conf/serve.yaml application args)
@dataclass
class ServeSettings:
    experiment: str = "cpu_tiny"  # conf/experiment preset: model, engine, zoo, agent settings
    overrides: list[str] = field(default_factory=list)  # key=value overrides of that experiment
    checkpoint: str = ""  # training checkpoint dir or HF path; empty: the experiment's model.name
    # the routing policy (orchestra/routing/registry.py, where=serve):
    # model: the orchestrator LLM plans every turn | estimator: the run's estimator router picks the route
    # (orchestra/routing/; `router` = a run dir holding router/, default: the checkpoint's run) | router: that
    # estimator picks one answer tier and the request is one call of it (docs/serving.md, "Router mode")
    policy: str = "model"
    router: str = ""
    # policy=router: the answer tiers it chooses among (empty: every one the estimator has a plan for); with
    # router_threshold, two: [strong, weak], the strong one called when P(strong correct) - P(weak correct) >= it
    router_tiers: list[str] = field(default_factory=list)
    router_threshold: float | None = None
    model_id: str = "orchestra"  # the name clients put in `model` (GET /v1/models)
    tools: str = "local"  # local: tools in the replica | actors: tool-server actors (RayToolClient)
    api_keys: list[str] = field(default_factory=list)  # prefer the env var; both are accepted
    api_keys_env: str = "ORCHESTRA_API_KEYS"  # comma-separated keys
    max_request_bytes: int = 1_000_000
    max_tokens_limit: int = 1024  # per-turn max_tokens a request may ask for
    rate_limit_per_s: float = 10.0  # per API key (per client address when auth is off); 0 disables
    rate_limit_burst: int = 20
    tool_timeout_s: float = 60.0
    # a YAML file binding the run's experts to live OpenAI-compatible endpoints (actors/serve/binding.py); empty:
    # the experts as the experiment configures them
    experts: str = ""


def settings_from_dict(args: dict[str, Any] | None) -> ServeSettings:
    """Typed settings from Serve application args; unknown keys and wrong types raise ValueError naming them."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from orchestra.routing import registry

    try:
        merged = OmegaConf.merge(OmegaConf.structured(ServeSettings), dict(args or {}))
        out: ServeSettings = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or "?"
        raise ValueError(f"serve settings: bad key {key!r}: {getattr(e, 'msg', str(e)).splitlines()[0]}") from None
    offered = registry.names("serve")  # orchestra/routing/registry.py: model, estimator, router
    if out.policy not in offered:
        raise ValueError(f"serve settings: policy must be {', '.join(offered[:-1])} or {offered[-1]}, "
                         f"got {out.policy!r}")
    if (out.router_tiers or out.router_threshold is not None) and out.policy != "router":
        raise ValueError("serve settings: router_tiers and router_threshold need policy=router")
    if len(set(out.router_tiers)) != len(out.router_tiers):
        raise ValueError(f"serve settings: router_tiers names a tier twice: {out.router_tiers}")
    if out.router_threshold is not None and (len(out.router_tiers) != 2 or not -1 <= out.router_threshold <= 1):
        raise ValueError("serve settings: router_threshold needs router_tiers=[strong,weak] (two answer tiers) "
                         f"and a value in [-1, 1] (a difference of two probabilities), got {out.router_threshold}")
    if out.tools not in ("local", "actors"):
        raise ValueError(f"serve settings: tools must be local or actors, got {out.tools!r}")
    if out.max_request_bytes < 1024 or out.max_tokens_limit < 1:
        raise ValueError("serve settings: max_request_bytes must be >= 1024 and max_tokens_limit >= 1")
    return out


def api_keys(settings: ServeSettings) -> list[str]:
    """Keys from config plus the env var (comma-separated); empty means the server is open (no auth)."""
    env = os.environ.get(settings.api_keys_env, "") if settings.api_keys_env else ""
    return [k.strip() for k in [*settings.api_keys, *env.split(",")] if k and k.strip()]


# ---------------------------------------------------------------- auth and rate limit
class KeyCheck:
    """Bearer keys compared in constant time; the identity handed on is a hash, so keys never reach logs."""

    def __init__(self, keys: list[str]):
        self._keys = [k.encode() for k in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def identify(self, authorization: str | None) -> str | None:
        """Return a key id (hash prefix), None when auth is off, or raise ApiError(401)."""
        if not self._keys:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", kind="authentication_error")
        given = token.strip().encode()
        ok = False
        for key in self._keys:  # no early exit: timing does not tell which key (or how much of one) matched
            ok |= hmac.compare_digest(given, key)
        if not ok:
            raise ApiError(401, "invalid API key", kind="authentication_error")
        return hashlib.sha256(given).hexdigest()[:12]


# ---------------------------------------------------------------- request schema
class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class ContentPart(_Strict):
    type: str
    text: str | None = None


class FunctionCall(_Strict):
    name: str = Field(min_length=1, max_length=128)
    arguments: str | dict[str, Any] = "{}"


class ToolCallIn(_Strict):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class FunctionDef(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolDef(_Strict):
    type: Literal["function"] = "function"
    function: FunctionDef


class Budget(_Strict):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    usd: float | None = Field(None, ge=0)
    seconds: float | None = Field(None, gt=0)
    turns: int | None = Field(None, ge=1)


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatRequest(_Strict):
    """OpenAI chat-completions request + Orchestra's `preference` and `budget`. With `tools` it is raw mode."""

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1, max_length=512)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=0, le=100_000)
    seed: int | None = Field(None, ge=0, lt=2**63)
    n: int = Field(1, ge=1, le=1)  # one choice per request
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = None
    preference: str | dict[str, float] | None = None
    budget: Budget | None = None
    user: str | None = None

    @property
    def raw_mode(self) -> bool:
        return bool(self.tools)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_request(body: bytes) -> ChatRequest:
    """Bytes -> ChatRequest, or ApiError(400) with a message naming the problem (malformed JSON, a field)."""
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        detail = e.msg if isinstance(e, json.JSONDecodeError) else str(e) or type(e).__name__
        raise ApiError(400, f"malformed JSON body: {detail}") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(data).__name__}")
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(body)"
        raise ApiError(400, f"field {where!r}: {err['msg']}", param=where) from None
    except RecursionError:
        raise ApiError(400, "request nests too deeply") from None


# ---------------------------------------------------------------- request -> agent inputs
def problem_of(req: ChatRequest) -> str:
    """The orchestrator's problem: the text of the last user message."""
    for msg in reversed(req.messages):
        if msg.role == "user":
            text = msg.text().strip()
            if not text:
                raise ApiError(400, "the last user message is empty", param="messages")
            return text
    raise ApiError(400, "messages must contain a user message (it is the problem to solve)", param="messages")


def preference_of(req: ChatRequest, default: str = "balanced") -> Preference:
    from orchestra.preferences import parse_preference

    spec = req.preference if req.preference is not None else default
    try:
        return parse_preference(spec)
    except ValueError as e:
        raise ApiError(400, f"preference: {e}", param="preference") from None


def request_messages(req: ChatRequest) -> list[dict[str, Any]]:
    """Request messages as chat-template dicts (raw mode); tool-call arguments become objects."""
    out: list[dict[str, Any]] = []
    for msg in req.messages:
        item: dict[str, Any] = {"role": "system" if msg.role == "developer" else msg.role, "content": msg.text()}
        if msg.tool_calls:
            calls = []
            for c in msg.tool_calls:
                args: Any = c.function.arguments
                if isinstance(args, str):
                    try:
                        args = json.loads(args) if args.strip() else {}
                    except (ValueError, RecursionError):
                        raise ApiError(400, f"tool call {c.function.name!r}: arguments are not valid JSON",
                                       param="messages") from None
                calls.append({"type": "function", "id": c.id, "function": {"name": c.function.name,
                                                                            "arguments": args}})
            item["tool_calls"] = calls
        if msg.name:
            item["name"] = msg.name
        out.append(item)
    return out


# ---------------------------------------------------------------- responses
def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion(cid: str, model: str, message: dict[str, Any], finish: str, use: dict[str, int],
               extra: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
           "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
           "usage": use}
    if extra is not None:
        out["orchestra"] = extra
    return out


def chunk(cid: str, model: str, delta: dict[str, Any] | None, finish: str | None = None,
          extra: dict[str, Any] | None = None, use: dict[str, int] | None = None) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    out: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()),
                           "model": model, "choices": choices}
    if use is not None:
        out["usage"] = use
    if extra is not None:
        out["orchestra"] = extra
    return out


def sse(obj: dict[str, Any] | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n"


FINISH = {"answered": "stop", "max_turns": "length", "budget": "length", "error": "error"}


TRACE_OUTPUT_CHARS = 500


def trace_of(traj: Trajectory, tiers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The tool chain a client sees: one entry per call with its tier, expert, cost, latency, error, whether
    the expert is simulated (a refused call names the expert its tier maps to), the code the sandbox ran and
    what it printed (enhance_reasoning; cut to TRACE_OUTPUT_CHARS), where a simulated answer came from
    (`answer_from`: code_output | document; tools/experts/sim.py), so a client can tell a real result from a
    simulated one, and what a consulted expert answered (`candidate`: a cascade's decision reads it)."""
    tiers = tiers or {}
    out = []
    for r in traj.tool_records:
        res = r.result
        output = None if res.code_output is None else str(res.code_output)[:TRACE_OUTPUT_CHARS]
        out.append({"turn": r.turn, "tool": r.name, "tier": r.tool_id, "expert": res.meta.get("model") or
                    tiers.get(r.tool_id), "cost_usd": res.cost_usd, "latency_s": res.latency_s, "error": res.error,
                    "budget_refused": res.refused, "simulated": bool(res.meta.get("simulated")),
                    "code": res.meta.get("code"), "output": output, "answer_from": res.meta.get("answer_from"),
                    "candidate": res.candidate})  # a consult: what the expert answered (the next call reads it)
    return out


def final_text(traj: Trajectory) -> str:
    """The assistant message: the answer, or what the episode has plus why it stopped."""
    if traj.answer is not None:
        # a simulated zoo has no gold answer to simulate for a served problem, so it may answer empty
        return traj.answer if traj.answer.strip() else "(the answering expert returned an empty answer)"
    gathered = [r.result.text for r in traj.tool_records if r.result.ok and r.result.text.strip()]
    have = f" What it gathered so far: {gathered[-1][:1000]}" if gathered else ""
    if traj.termination == "budget":
        return "The budget ran out before a final answer." + have
    return f"No final answer within {len(traj.turns)} orchestrator turn(s)." + have
