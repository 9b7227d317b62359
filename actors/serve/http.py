"""The HTTP layer: `create_api(service, ...)` is the FastAPI app over an OrchestraService: auth (Bearer keys,
constant-time), per-key rate limit (429), body size limit (413), JSON/schema validation (400, field named), SSE
streaming, and a metrics middleware. Usable without Ray (benchmarks, unit tests) through an ASGI transport.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the string annotations against these globals

from actors import metrics
from actors.rate_limit import RateLimiter
from actors.serve import api
from actors.serve.api import ApiError, ChatRequest
from actors.serve.service import OrchestraService

log = logging.getLogger("orchestra.serve")


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
    limiter = RateLimiter(rate_limit_per_s, rate_limit_burst)
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
