"""The serving domain, no Ray and no HTTP: `OrchestraService` turns a validated request into one agent-loop episode
(the same AgentLoop, chat template and parser as training), or, in raw mode (the request has `tools`), one generate
whose hermes tool calls come back as OpenAI `tool_calls` for clients running their own loop. Under
`policy: router` the episode is one expert call that the estimator router picks; the expert's reply is the
answer, streamed through as it arrives (docs/serving.md, "Router mode"). Wire format: actors/serve/api.py.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from actors import metrics
from actors.serve import api
from actors.serve.api import ApiError, ChatRequest
from orchestra.agent.loop import AgentLoop
from orchestra.agent.parse import parse
from orchestra.engine import Sampling
from orchestra.types import Preference, Task, Trajectory

log = logging.getLogger("orchestra.serve")


@dataclass
class Plan:
    """A validated orchestrated request, ready to run."""

    cid: str
    task: Task
    sampling: Sampling
    budget: dict[str, Any]
    pref: Preference
    include_usage: bool = False


class OrchestraService:
    def __init__(self, loop: AgentLoop, catalogue: list[str], tiers: dict[str, str], *, model_id: str = "orchestra",
                 max_tokens: int = 96, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 max_tokens_limit: int = 1024, default_preference: str = "balanced", router: Any = None,
                 annotate: Any = None):
        self.loop, self.catalogue, self.tiers, self.model_id = loop, list(catalogue), dict(tiers), model_id
        # policy=estimator: a task -> scripted engine function (orchestra/routing/router.py); None: the model
        self.router = router
        # agent.route_hints: [task] -> None, attaching the run's router's estimates the prompt shows
        self.annotate = annotate
        self.defaults = Sampling(max_tokens=max_tokens, temperature=temperature, top_p=top_p, top_k=top_k)
        self.max_tokens_limit, self.default_preference = max_tokens_limit, default_preference

    # ------------------------------------------------------------ validation shared by both modes
    def _sampling(self, req: ChatRequest) -> Sampling:
        if req.model not in (None, "", self.model_id):
            raise ApiError(404, f"model {req.model!r} not found; this server serves {self.model_id!r}",
                           param="model", kind="not_found_error")
        max_tokens = req.requested_max_tokens() or self.defaults.max_tokens
        if max_tokens > self.max_tokens_limit:
            raise ApiError(400, f"max_tokens {max_tokens} exceeds this server's limit {self.max_tokens_limit}",
                           param="max_tokens")
        d = self.defaults
        return Sampling(max_tokens=max_tokens, temperature=d.temperature if req.temperature is None else req.temperature,
                        top_p=d.top_p if req.top_p is None else req.top_p,
                        top_k=d.top_k if req.top_k is None else req.top_k, seed=req.seed)

    def _budget(self, req: ChatRequest) -> dict[str, Any]:
        """The request's caps, never looser than the server's own (agent.budget in the experiment config)."""
        asked = req.budget
        out = {}
        for key, server in (("usd", self.loop.budget_usd), ("seconds", self.loop.budget_seconds),
                            ("turns", self.loop.budget_turns)):
            mine = getattr(asked, key) if asked is not None else None
            caps = [v for v in (mine, server) if v is not None]
            out[key] = min(caps) if caps else None
        return out

    def plan(self, req: ChatRequest) -> Plan:
        """Validate an orchestrated request (raises ApiError) and build its Task: the last user message is the
        problem, the zoo's catalogue the tools, the zoo tiers the model mapping; the answer is unknown."""
        sampling = self._sampling(req)
        pref = api.preference_of(req, self.default_preference)
        cid = api.completion_id()
        task = Task(id=cid, problem=api.problem_of(req), answer="", data_source="serve", tools=list(self.catalogue),
                    model_mapping=dict(self.tiers), pref=pref, meta={"source": "serve"})
        if self.annotate is not None:
            self.annotate([task])
        include = bool(req.stream_options and req.stream_options.include_usage)
        return Plan(cid, task, sampling, self._budget(req), pref, include)

    # ------------------------------------------------------------ orchestrated mode
    async def _run(self, plan: Plan, on_step: Any = None, on_delta: Any = None) -> Trajectory:
        b = plan.budget
        warm = getattr(self.loop.tools, "aschemas", None)
        if warm is not None:  # Ray tool client: fetch schemas without blocking the replica's event loop
            await warm(plan.task)
        loop = self.loop
        route = None
        if self.router is not None:  # the estimator router picks the whole route up front, in milliseconds
            loop = copy.copy(self.loop)
            loop.engine = self.router(plan.task)
            route = getattr(loop.engine, "route", None)
        if route is not None and route.get("kind") == "cascade":  # the cascade router: its consults, then one end
            loop.max_turns = len(route.get("models") or {}) or 3  # (the answer is the adopted or escalated one)
        elif route is not None:  # router mode: one expert call, never a second (a failed call's error is the reply)
            loop.max_turns = 1
            if on_delta is not None and warm is None:  # in-process tools: the expert's text reaches the caller
                loop.tools = _Relay(loop.tools, on_delta)
        traj = await loop.run(plan.task, plan.sampling, uid=plan.cid, episode_id=plan.cid,
                              budget_usd=b["usd"], budget_seconds=b["seconds"], budget_turns=b["turns"],
                              on_step=on_step)
        if route is not None:
            traj.meta["route"] = route
        return traj

    def _summary(self, plan: Plan, traj: Trajectory, wall_s: float) -> dict[str, Any]:
        return {"cost_usd": traj.cost_usd, "latency_s": traj.latency_s, "wall_s": round(wall_s, 6),
                "termination": traj.termination, "turns": len(traj.turns), "budget": plan.budget,
                "preference": plan.pref, "trace": api.trace_of(traj, plan.task.model_mapping),
                # who chose the route: the served model, the run's estimator router (policy=estimator), or
                # that router picking one call (policy=router: its choice and estimates under `router`)
                "policy": "model" if self.router is None else "router" if "route" in traj.meta else "estimator",
                **({"router": traj.meta["route"]} if "route" in traj.meta else {})}

    @staticmethod
    def _content(traj: Trajectory, relayed: list[str]) -> str:
        """The assistant message: router mode answers with the expert's reply as it wrote it (what a router in
        front of one's own models passes on); otherwise, and when the call failed, the answer (api.final_text)."""
        if relayed and traj.answer is not None and "route" in traj.meta:
            return "".join(relayed)
        return api.final_text(traj)

    @staticmethod
    def _check(traj: Trajectory) -> None:
        if traj.termination == "budget":
            metrics.record("serve_budget_stops_total")
        if traj.termination == "error":
            log.error("episode %s failed: %s", traj.episode_id, traj.error)
            raise ApiError(500, "the orchestrator failed; see the server log", kind="server_error")
        if not traj.turns and traj.meta.get("context_exhausted"):
            raise ApiError(400, "the problem is too long for the orchestrator's context", param="messages")

    async def complete(self, plan: Plan) -> dict[str, Any]:
        start, relayed = time.perf_counter(), []
        traj = await self._run(plan, on_delta=relayed.append)
        self._check(traj)
        prompt, completion = traj.policy_tokens
        log.info("completion %s: %s, %d turns, $%.6f", plan.cid, traj.termination, len(traj.turns), traj.cost_usd)
        return api.completion(plan.cid, self.model_id, {"role": "assistant", "content": self._content(traj, relayed)},
                              api.FINISH[traj.termination], api.usage(prompt, completion),
                              self._summary(plan, traj, time.perf_counter() - start))

    async def stream(self, plan: Plan) -> AsyncIterator[str]:
        """SSE: a role chunk, one chunk per step (tool call / observation / format error, as reasoning text
        plus an `orchestra` object), the final answer as content, a finish chunk, optional usage, [DONE]. In
        router mode the expert's reply is the content, chunk by chunk as the expert streams it."""
        start, relayed = time.perf_counter(), []
        queue: asyncio.Queue = asyncio.Queue()

        async def runner() -> Trajectory:
            try:
                return await self._run(plan, on_step=lambda kind, payload: queue.put_nowait((kind, payload)),
                                       on_delta=lambda text: queue.put_nowait(("delta", text)))
            finally:
                queue.put_nowait(None)

        episode = asyncio.ensure_future(runner())
        cid, model = plan.cid, self.model_id
        try:
            yield api.sse(api.chunk(cid, model, {"role": "assistant", "content": ""}))
            while (item := await queue.get()) is not None:
                kind, payload = item
                if kind == "answer":
                    continue  # the answer goes out as content once the episode is over
                if kind == "delta":  # router mode: the expert's text, passed through as it arrives
                    relayed.append(payload)
                    yield api.sse(api.chunk(cid, model, {"content": payload}))
                    continue
                yield api.sse(api.chunk(cid, model, {"reasoning_content": _step_line(kind, payload)},
                                        extra={"step": kind, **payload}))
            traj = await episode
            summary = self._summary(plan, traj, time.perf_counter() - start)
            if traj.termination == "budget":
                metrics.record("serve_budget_stops_total")
            if traj.termination == "error":
                log.error("episode %s failed: %s", cid, traj.error)
                yield api.sse({"error": {"message": "the orchestrator failed", "type": "server_error", "code": 500}})
            else:
                if not relayed:  # else the content went out as it came
                    yield api.sse(api.chunk(cid, model, {"content": api.final_text(traj)}))
                yield api.sse(api.chunk(cid, model, {}, api.FINISH[traj.termination], extra=summary))
                if plan.include_usage:
                    yield api.sse(api.chunk(cid, model, None, use=api.usage(*traj.policy_tokens)))
            yield api.sse("[DONE]")
        finally:
            if not episode.done():  # the client went away: stop spending on its behalf
                episode.cancel()

    # ------------------------------------------------------------ raw mode
    async def raw(self, req: ChatRequest) -> tuple[str, dict[str, Any], str, dict[str, int]]:
        """One generate over the request's messages + tools -> (id, assistant message, finish, usage)."""
        sampling = self._sampling(req)
        prompter = self.loop.prompter
        use_tools = req.tool_choice != "none"
        schemas = [t.model_dump() for t in req.tools or []] if use_tools else None
        try:
            prompt_ids = prompter.encode(api.request_messages(req), schemas)
        except ApiError:
            raise
        except Exception as e:  # a template that rejects this conversation (roles, order)
            raise ApiError(400, f"cannot render messages with the chat template: {e}", param="messages") from None
        limit = self.loop.max_context_tokens
        if len(prompt_ids) + sampling.max_tokens > limit:
            raise ApiError(400, f"prompt ({len(prompt_ids)} tokens) + max_tokens ({sampling.max_tokens}) exceeds "
                                f"the context limit of {limit} tokens", param="messages")
        gen = await self.loop.engine.generate(prompt_ids, sampling)
        ids = list(gen.token_ids)
        if ids and ids[-1] in self.loop.eos_token_ids:
            ids = ids[:-1]
        text = prompter.decode(ids)
        parsed = parse(text, answer_mode="text")
        message: dict[str, Any] = {"role": "assistant"}
        finish = "length" if gen.finish_reason == "length" else "stop"
        if use_tools and parsed.calls:
            message["content"] = parsed.content or None
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:16]}", "type": "function",
                                      "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                     for c in parsed.calls]
            finish = "tool_calls"
        else:
            message["content"] = parsed.content if parsed.ok else prompter.tok.decode(ids, skip_special_tokens=True)
        return api.completion_id(), message, finish, api.usage(len(prompt_ids), len(gen.token_ids))


def _step_line(kind: str, p: dict[str, Any]) -> str:
    turn = int(p.get("turn", 0)) + 1
    if kind == "tool_call":
        return f"[turn {turn}] call {p.get('name')}({json.dumps(p.get('arguments', {}))})\n"
    if kind == "observation":
        err = f" error: {p['error']}" if p.get("error") else ""
        text = " ".join(str(p.get("text", "")).split())[:200]
        return f"[turn {turn}] {p.get('name')} -> {text} (${p.get('cost_usd', 0):.6f}, {p.get('latency_s', 0):.2f}s){err}\n"
    label = "format error" if kind == "error" else kind
    return f"[turn {turn}] {label}: {p.get('message', '')}\n"


class _Relay:
    """A ToolClient passing every call's context on with `on_delta` set (router mode: the answering expert's
    text reaches the response as it arrives, tools/experts/openai.py)."""

    def __init__(self, inner: Any, on_delta: Callable[[str], None]):
        self.inner, self.on_delta = inner, on_delta

    def __getattr__(self, name: str) -> Any:  # schemas, names ... as the wrapped client has them
        return getattr(self.inner, name)

    async def call(self, call: Any, ctx: Any) -> Any:
        return await self.inner.call(call, dataclasses.replace(ctx, on_delta=self.on_delta))
