"""The Serve endpoint: an OpenAI-compatible HTTP API that runs the orchestrator's full agent loop server-side.

- `OrchestraService` (plain class, no Ray): turns a validated request into one agent-loop episode (the same
  AgentLoop, chat template and parser as training), or, in raw mode (the request has `tools`), one generate
  whose hermes tool calls come back as OpenAI `tool_calls` for clients running their own loop. Under
  `policy: router` the episode is one expert call that the estimator router picks; the expert's reply is the
  answer, streamed through as it arrives (docs/serving.md, "Router mode").
- `create_api(service, ...)`: the FastAPI app: auth (Bearer keys, constant-time), per-key rate limit (429),
  body size limit (413), JSON/schema validation (400, field named), SSE streaming. Usable without Ray
  (benchmarks, unit tests) through an ASGI transport.
- `OrchestraServer` + `deployment(...)` + `build_app(args)`: the Serve replica (`@serve.ingress` with the app
  built after the constructor) and the builder that `serve run conf/serve.yaml` imports.
  `build_service(settings)` is the production builder (load_policy + HF/vLLM engine + zoo tools in-process or
  behind tool-server actors); tests inject their own builder. Replicas, autoscaling and resources come from
  conf/serve.yaml; starting Ray and Serve is cluster/serve.py's job. Wire format: actors/serve/api.py.
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
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the string annotations against these globals

from actors import metrics
from actors.serve import api
from actors.serve.api import ApiError, ChatRequest, ServeSettings
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
                 max_tokens_limit: int = 1024, default_preference: str = "balanced", router: Any = None):
        self.loop, self.catalogue, self.tiers, self.model_id = loop, list(catalogue), dict(tiers), model_id
        # policy=estimator: a task -> scripted engine function (orchestra/routing/router.py); None: the model
        self.router = router
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
        if route is not None:  # router mode: one expert call, never a second (a failed call's error is the reply)
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


# ---------------------------------------------------------------- the HTTP app
class _ChatMetrics:
    """ASGI middleware: status and latency to the response's first byte of every chat request, refusals
    (401/413/429) and failures included. Plain ASGI, so streamed responses and client disconnects pass through
    untouched."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http" or scope.get("path") != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        start, seen = time.perf_counter(), []

        def done(code: int) -> None:
            seen.append(code)
            metrics.record("serve_requests_total", code=code)
            metrics.record("serve_latency_seconds", time.perf_counter() - start, code=code)

        async def watch(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start" and not seen:
                done(int(message.get("status", 0)))
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if not seen:  # an exception escaped: the outer handler answers 500
                done(500)


def create_api(service: OrchestraService, *, api_keys: list[str] | None = None, max_request_bytes: int = 1_000_000,
               rate_limit_per_s: float = 0.0, rate_limit_burst: int = 20) -> Any:
    """The FastAPI app over `service`. No keys: open (in-process use and tests only; the Serve replica,
    OrchestraServer, refuses to start without keys)."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse

    keys = api.KeyCheck(list(api_keys or []))
    limiter = api.RateLimiter(rate_limit_per_s, rate_limit_burst)
    if not keys.enabled:
        log.warning("serving without API keys: anyone who can reach this port can spend the zoo's budget")
    app = FastAPI(title="Orchestra", docs_url=None, redoc_url=None)
    app.add_middleware(_ChatMetrics)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError):
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError):  # never 422: OpenAI clients expect 400
        return JSONResponse(ApiError(400, f"invalid request: {e.errors()[:1]}").body(), status_code=400)

    @app.exception_handler(Exception)
    async def _internal(_: Request, e: Exception):
        log.exception("internal error")
        return JSONResponse({"error": {"message": "internal server error", "type": "server_error", "code": 500}},
                            status_code=500)

    def admit(request: Request) -> None:
        who = keys.identify(request.headers.get("authorization"))
        identity = who or (request.client.host if request.client else "anonymous")
        wait = limiter.take(identity)
        if wait > 0:
            raise ApiError(429, "rate limit exceeded; retry later", kind="rate_limit_error",
                           headers={"Retry-After": str(max(1, int(wait + 0.999)))})

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_request_bytes:
            raise ApiError(413, f"request body exceeds {max_request_bytes} bytes", kind="request_too_large")
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > max_request_bytes:
                raise ApiError(413, f"request body exceeds {max_request_bytes} bytes", kind="request_too_large")
        return bytes(body)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "model": service.model_id}

    @app.get("/v1/models")
    async def models(request: Request):
        admit(request)
        return {"object": "list", "data": [{"id": service.model_id, "object": "model", "created": 0,
                                            "owned_by": "orchestra"}]}

    # The body is parsed by hand (400s, size limit), so its schema is declared for /openapi.json explicitly.
    body_schema = ChatRequest.model_json_schema(ref_template="#/components/schemas/{model}")
    components = body_schema.pop("$defs", {})
    body_doc = {"requestBody": {"required": True, "content": {"application/json": {"schema": body_schema}}}}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            doc.setdefault("components", {}).setdefault("schemas", {}).update(components)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.post("/v1/chat/completions", openapi_extra=body_doc)
    async def chat(request: Request):
        admit(request)
        req = api.parse_request(await read_body(request))
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        if req.raw_mode:
            cid, message, finish, use = await service.raw(req)
            if not req.stream:
                return api.completion(cid, service.model_id, message, finish, use)
            return StreamingResponse(_raw_chunks(cid, service.model_id, message, finish, use, req),
                                     media_type="text/event-stream", headers=headers)
        plan = service.plan(req)  # validation errors surface before any byte is streamed
        if req.stream:
            return StreamingResponse(service.stream(plan), media_type="text/event-stream", headers=headers)
        return await service.complete(plan)

    return app


async def _raw_chunks(cid: str, model: str, message: dict[str, Any], finish: str, use: dict[str, int],
                      req: ChatRequest) -> AsyncIterator[str]:
    yield api.sse(api.chunk(cid, model, {"role": "assistant", "content": ""}))
    if message.get("tool_calls"):
        calls = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
        yield api.sse(api.chunk(cid, model, {"tool_calls": calls}))
    elif message.get("content"):
        yield api.sse(api.chunk(cid, model, {"content": message["content"]}))
    yield api.sse(api.chunk(cid, model, {}, finish))
    if req.stream_options and req.stream_options.include_usage:
        yield api.sse(api.chunk(cid, model, None, use=use))
    yield api.sse("[DONE]")


# ---------------------------------------------------------------- production builder and the Serve replica
def resolve_checkpoint(path: str) -> str:
    """A policy dir for load_policy: an HF id (not a directory) as is, else orchestra.rundir.checkpoint.model_dir."""
    from orchestra.rundir.checkpoint import model_dir

    return str(model_dir(path)) if Path(path).expanduser().is_dir() else path


def build_service(settings: ServeSettings) -> OrchestraService:
    """Production wiring: experiment config -> policy + engine + zoo tools (+ tool-server actors) -> service."""
    from orchestra.agent.prompt import Prompter
    from orchestra.config import load_config, task_tiers
    from orchestra.policy.models import load_policy
    from orchestra.policy.tokenizer import eos_token_ids

    cfg = load_config([f"experiment={settings.experiment}", *settings.overrides])
    if settings.experts:  # the run's experts served by live endpoints; refuses an unbound trained tier
        from actors.serve.binding import bind_experts

        cfg = bind_experts(cfg, settings.experts)
    m = cfg.model
    name = resolve_checkpoint(settings.checkpoint) if settings.checkpoint else m.name
    if cfg.engine.kind == "vllm":  # the gpu extra: vLLM loads the weights itself from a saved dir
        from orchestra.engine.vllm import VLLMEngine
        from orchestra.policy.models import load_tokenizer, smollm2_dir

        if name == "tiny":
            raise ValueError("engine.kind=vllm needs a saved checkpoint: pass checkpoint=<run or HF dir>")
        tok = load_tokenizer(name, tiny=m.tiny, cache_dir=m.cache_dir, chat_template=m.chat_template)
        from orchestra.rundir.checkpoint import servable_dir

        # vLLM loads every *.safetensors of a dir: a learner checkpoint's reference weights would be mixed in
        path = str(smollm2_dir(m.cache_dir)) if name == "smollm2" else (
            str(servable_dir(name)) if Path(name).is_dir() else name)
        engine: Any = VLLMEngine(path, dtype=m.dtype, max_model_len=cfg.engine.max_model_len,
                                 gpu_memory_utilization=cfg.engine.gpu_memory_utilization, seed=cfg.seed)
    elif cfg.engine.kind == "remote":  # a running vLLM server holds the weights (python -m cluster.vllm_server)
        from orchestra.engine.remote import RemoteEngine
        from orchestra.policy.models import load_tokenizer

        tok = load_tokenizer(name, tiny=m.tiny, cache_dir=m.cache_dir, chat_template=m.chat_template)
        engine = RemoteEngine(**cfg.engine.remote_kwargs())
    else:
        from orchestra.engine.hf import HFEngine

        model, tok = load_policy(name, tiny=m.tiny, dtype=m.dtype, device=m.device,
                                 attn_implementation=m.attn_implementation, cache_dir=m.cache_dir,
                                 chat_template=m.chat_template, seed=cfg.seed)
        engine = HFEngine.from_model(model, tok, device=str(model.device), **cfg.engine.hf_kwargs())
    eos = eos_token_ids(tok)
    a = cfg.agent
    prompter = Prompter(tok, **a.prompter_kwargs())
    loop = AgentLoop.from_config(a, engine, _tool_client(settings, cfg), prompter, eos_token_ids=eos)
    s = cfg.sampling
    # the tiers the policy was trained with (data.tiers when the experiment sets them, as cpu_tiny does): the
    # zoo's full list would show it a catalogue it never saw and map its tier ids to other experts
    return OrchestraService(loop, list(cfg.zoo.tools), task_tiers(cfg), model_id=settings.model_id,
                            max_tokens=s.max_tokens, temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
                            max_tokens_limit=settings.max_tokens_limit,
                            router=router_engine(settings, tok, eos, task_tiers(cfg)))


def router_engine(settings: ServeSettings, tok: Any, eos: list[int], tiers: dict[str, str] | None = None) -> Any:
    """policy=estimator: task -> a scripted engine playing the route the estimator router (saved by an
    expected-value warm start in `<run dir>/router/`) picks under the request's preference; policy=router: one
    `answer` call of the tier it picks (EstimatorRouter.single_caller); None for the model. `tiers`: the served
    tier -> expert mapping."""
    if settings.policy == "model":
        return None
    from orchestra.engine.scripted import script_engine
    from orchestra.routing.router import EstimatorRouter, find_router
    from tools.retrieval.dense import embed_texts

    where = settings.router or settings.checkpoint
    found = find_router(where) if where else None
    if found is None:
        raise ValueError(f"policy={settings.policy}: no estimator router under "
                         f"{where or '(no checkpoint or router given)'}; train with sft.teacher=expected_value "
                         "(make train does) or set router=<run dir>")
    router = EstimatorRouter.load(found, embed_texts)
    if settings.policy == "router":
        return router.single_caller(tok, eos[0], tiers, settings.router_tiers, settings.router_threshold)
    return lambda task: script_engine(tok, router.script(task), eos[0])


class _Relay:
    """A ToolClient passing every call's context on with `on_delta` set (router mode: the answering expert's
    text reaches the response as it arrives, tools/experts/openai.py)."""

    def __init__(self, inner: Any, on_delta: Callable[[str], None]):
        self.inner, self.on_delta = inner, on_delta

    def __getattr__(self, name: str) -> Any:  # schemas, names ... as the wrapped client has them
        return getattr(self.inner, name)

    async def call(self, call: Any, ctx: Any) -> Any:
        return await self.inner.call(call, dataclasses.replace(ctx, on_delta=self.on_delta))


def _tool_client(settings: ServeSettings, cfg: Any) -> Any:
    if settings.tools == "local":
        from tools.base import LocalToolClient

        if cfg.zoo.spend_cap_usd is not None:  # a cap per replica would multiply it by the replica count
            raise ValueError("zoo.spend_cap_usd is enforced by one spend ledger shared by every replica: serve with "
                             "tools=actors (conf/serve.yaml, or `tools=actors` in make serve's ARGS)")
        from tools.registry import build_tools

        return LocalToolClient(build_tools(cfg.zoo, list(cfg.zoo.tools)))
    from actors.tool_server import RayToolClient

    return RayToolClient(tool_server_handles(cfg.zoo, list(cfg.zoo.tools)), timeout_s=settings.tool_timeout_s)


TOOL_NAMESPACE = "orchestra-serve"


def tool_server_handles(zoo: Any, names: list[str]) -> dict[str, Any]:
    """Handles of the shared tool-server actors for `zoo`, started if absent. Named by tool and a hash of the
    zoo config, so every replica (and cluster/serve.py, which starts them first so they outlive any replica)
    finds the same actors, and a different zoo never reuses them."""
    import hashlib

    import ray

    from actors.tool_server import make_spend_ledger, make_tool_server
    from tools.registry import zoo_dict

    zd = zoo_dict(zoo)
    tag = hashlib.sha256(json.dumps(zd, sort_keys=True, default=str).encode()).hexdigest()[:10]
    srv = zd.get("server") or {}

    def get_or_make(actor: str, make: Any) -> Any:
        for _ in range(3):  # two replicas may race to create the same actor: the loser looks it up
            try:
                return ray.get_actor(actor, namespace=TOOL_NAMESPACE)
            except ValueError:
                pass
            try:
                return make()
            except ValueError:
                continue
        raise RuntimeError(f"could not create or find actor {actor}")

    # zoo.spend_cap_usd: one ledger for the deployment (every replica's tool servers reserve and settle in it)
    ledger = None if zd.get("spend_cap_usd") is None else get_or_make(
        f"serve-spend-ledger:{tag}", lambda: make_spend_ledger(zd["spend_cap_usd"], name=f"serve-spend-ledger:{tag}",
                                                               namespace=TOOL_NAMESPACE))
    return {name: get_or_make(f"serve-tool:{name}:{tag}", lambda name=name: make_tool_server(
        name, zd, num_cpus=srv.get("num_cpus", 0.05), max_concurrency=srv.get("max_concurrency", 64),
        max_restarts=srv.get("max_restarts", 3), namespace=TOOL_NAMESPACE, actor_name=f"serve-tool:{name}:{tag}",
        timeout_s=srv.get("timeout_s", 60.0), retries=srv.get("retries", 2), backoff_s=srv.get("backoff_s", 0.2),
        rate_limit_per_s=srv.get("rate_limit_per_s", 0.0), cache_size=srv.get("cache_size", 0), ledger=ledger))
        for name in names}


class OrchestraServer:
    """The Serve replica: builds the service once (the model load), then serves `create_api` over it."""

    def __init__(self, settings: dict[str, Any] | None = None,
                 builder: Callable[[ServeSettings], OrchestraService] | None = None):
        self.settings = api.settings_from_dict(settings)
        if not api.api_keys(self.settings):  # the deployed endpoint always requires a key
            raise ValueError(f"no API keys: set {self.settings.api_keys_env or 'ORCHESTRA_API_KEYS'} (comma-separated) "
                             "or `api_keys` in conf/serve.yaml; the Serve endpoint does not run open")
        self.service = (builder or build_service)(self.settings)
        if builder is None:  # production: offer only the tools that can work on this host
            from actors.serve.catalogue import restrict_to_working_tools

            restrict_to_working_tools(self.service, self.settings)

    def __serve_build_asgi_app__(self) -> Any:
        s = self.settings
        return create_api(self.service, api_keys=api.api_keys(s), max_request_bytes=s.max_request_bytes,
                          rate_limit_per_s=s.rate_limit_per_s, rate_limit_burst=s.rate_limit_burst)


def deployment(name: str = "OrchestraServer", **options: Any) -> Any:
    """The Serve deployment of OrchestraServer; `options` are Serve's (num_replicas, autoscaling_config,
    ray_actor_options, max_ongoing_requests ...), normally read from conf/serve.yaml."""
    from ray import serve

    return serve.deployment(serve.ingress()(OrchestraServer), name=name).options(**options)


def build_app(args: dict[str, Any] | None = None) -> Any:
    """Application builder for `serve run conf/serve.yaml` (import_path: actors.serve.app:build_app)."""
    args = dict(args or {})
    api.settings_from_dict(args)  # fail in the driver, naming the key, before any replica starts
    return deployment().bind(args)
