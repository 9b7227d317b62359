"""The Serve endpoint's wire format and app without Ray: schemas, auth, rate limit, settings, cluster/serve.py's
plan, and the FastAPI app in-process (httpx ASGI transport) with a scripted engine and fake tools."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from actors.serve import api
from actors.serve.api import ApiError
from actors.serve.http import create_api
from actors.serve.service import OrchestraService
from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.types import ToolRecord, ToolResult, Trajectory
from tests.helpers.fakes import ByteTokenizer, FakeTool, ScriptedEngine, call_text
from tools.base import LocalToolClient

USER = [{"role": "user", "content": "what is 2 + 2?"}]


def error_of(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as e:
        api.parse_request(body)
    return e.value


def test_parse_request_names_the_problem():
    assert "malformed JSON" in error_of(b'{"messages": [').message
    assert "NaN" in error_of(b'{"messages": [], "temperature": NaN}').message
    assert "JSON object" in error_of(b"[1, 2]").message
    assert error_of(b"[" * 100_000).status == 400  # nesting past the parser's recursion limit
    assert error_of(b"\xff\xfe").status == 400  # not UTF-8
    e = error_of(json.dumps({"messages": [{"role": "user", "content": 3}]}).encode())
    assert e.status == 400 and e.param.startswith("messages.0.content")
    assert error_of(json.dumps({"messages": USER, "n": 2}).encode()).param == "n"
    assert error_of(json.dumps({"messages": USER, "budget": {"usd": 1, "dollars": 2}}).encode()).param == "budget.dollars"
    req = api.parse_request(json.dumps({"messages": USER, "frequency_penalty": 0.5, "logit_bias": {}}).encode())
    assert req.messages[0].text() == "what is 2 + 2?" and not req.raw_mode  # unknown OpenAI fields are ignored


def test_key_check_is_bearer_and_never_echoes_the_key(monkeypatch):
    assert api.KeyCheck([]).identify(None) is None  # auth off
    keys = api.KeyCheck(["alpha-key", "beta-key"])
    for header in (None, "", "Bearer", "Basic alpha-key", "Bearer alpha", "Bearer alpha-key-longer"):
        with pytest.raises(ApiError) as e:
            keys.identify(header)
        assert e.value.status == 401 and "alpha-key" not in e.value.message
    a, b = keys.identify("Bearer alpha-key"), keys.identify("bearer beta-key")
    assert a != b and "alpha" not in a
    monkeypatch.setenv("MY_KEYS", " k1, ,k2 ")
    assert api.api_keys(api.ServeSettings(api_keys=["k0"], api_keys_env="MY_KEYS")) == ["k0", "k1", "k2"]


def test_settings_and_cli_plan():
    with pytest.raises(ValueError, match="max_tokens_limt"):
        api.settings_from_dict({"max_tokens_limt": 3})
    with pytest.raises(ValueError, match="tools"):
        api.settings_from_dict({"tools": "remote"})
    from cluster.serve import plan

    p = plan(["port=8123", "replicas=2", "checkpoint=runs/x", "model.dtype=bfloat16", "num_gpus=1"])
    assert p.http_options["port"] == 8123 and p.deployment_options["num_replicas"] == 2
    assert p.args["checkpoint"] == "runs/x" and p.args["overrides"] == ["agent.repeat_guard=true", "model.dtype=bfloat16"]
    assert p.deployment_options["ray_actor_options"]["num_gpus"] == 1.0
    assert p.args["experiment"] == "cpu_tiny" and p.app_name == "orchestra"
    with pytest.raises(ValueError, match="bogus"):
        plan(["bogus=1"])


def test_final_text_says_why_it_stopped():
    rec = ToolRecord(0, "search", "search-1", {}, ToolResult(text="Paris is the capital."))
    traj = Trajectory(task_id="t", uid="u", termination="budget", tool_records=[rec])
    assert api.final_text(traj).startswith("The budget ran out") and "Paris" in api.final_text(traj)
    assert api.final_text(Trajectory(task_id="t", uid="u", answer="4", termination="answered")) == "4"


# ---------------------------------------------------------------- the app in-process
def make_app(engine_script=None, budget_usd=None, fail=False, **kw):
    tok = ByteTokenizer()

    def policy(prompt: str) -> str:
        if "[Attempt" in prompt:
            return call_text("answer", model="answer-1")
        return call_text("search", model="search-1")

    tools = {"search": FakeTool("search", cost_usd=0.01, latency_s=0.5),
             "answer": FakeTool("answer", cost_usd=0.02, reply="4", answers=True)}
    engine = ScriptedEngine(tok, engine_script or policy)
    if fail:
        async def broken(*_a, **_k):
            raise RuntimeError("engine down")
        engine.generate = broken
    loop = AgentLoop(engine, LocalToolClient(tools), Prompter(tok), eos_token_ids=[tok.eos_token_id],
                     budget_usd=budget_usd)
    svc = OrchestraService(loop, ["search", "answer"], {"search-1": "gpt-5", "answer-1": "gpt-5"}, max_tokens=200)
    return create_api(svc, **kw)


async def ask(app, body, headers=None):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t") as c:
        return await c.post("/v1/chat/completions", json=body, headers=headers or {})


async def test_in_process_completion_and_server_budget_cap():
    r = await ask(make_app(), {"messages": USER})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "4"
    assert r.json()["orchestra"]["cost_usd"] == pytest.approx(0.03)
    # the server's own cap (agent.budget.usd) wins over a looser request budget
    r = await ask(make_app(budget_usd=0.015), {"messages": USER, "budget": {"usd": 5.0}})
    ext = r.json()["orchestra"]
    assert ext["budget"]["usd"] == 0.015 and ext["termination"] == "budget" and ext["cost_usd"] <= 0.015
    assert ext["trace"][-1]["budget_refused"] and r.json()["choices"][0]["finish_reason"] == "length"


async def test_openapi_documents_the_request_body():
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app()), base_url="http://t") as c:
        doc = (await c.get("/openapi.json")).json()
    body = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"messages", "budget", "preference", "tools"} <= set(body["properties"])
    assert "Budget" in doc["components"]["schemas"] and "ChatMessage" in doc["components"]["schemas"]


async def test_engine_failure_is_a_500_not_a_hang():
    r = await ask(make_app(fail=True), {"messages": USER})
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    r = await ask(make_app(fail=True), {"messages": USER, "stream": True})
    assert '"server_error"' in r.text and r.text.rstrip().endswith("data: [DONE]")


async def test_stream_cancelled_by_client_stops_the_episode():
    started, cancelled = asyncio.Event(), asyncio.Event()
    tok = ByteTokenizer()

    class SlowEngine(ScriptedEngine):
        async def generate(self, prompt_ids, sampling):
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

    loop = AgentLoop(SlowEngine(tok, ["x"]), LocalToolClient({}), Prompter(tok))
    svc = OrchestraService(loop, [], {})
    gen = svc.stream(svc.plan(api.ChatRequest.model_validate({"messages": USER, "stream": True})))
    first = await gen.__anext__()
    assert first.startswith("data: ")
    pending = asyncio.ensure_future(gen.__anext__())
    await asyncio.wait_for(started.wait(), 5)
    pending.cancel()  # what Starlette does when the client disconnects mid-stream
    with pytest.raises(asyncio.CancelledError):
        await pending
    await asyncio.wait_for(cancelled.wait(), 5)  # the episode stopped spending


async def test_raw_mode_bad_arguments_and_context_limit():
    app = make_app(engine_script=lambda p: "plain words")
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    msgs = [{"role": "user", "content": "x"},
            {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": "{oops"}}]}]
    r = await ask(app, {"messages": msgs, "tools": tools})
    assert r.status_code == 400 and "arguments" in r.json()["error"]["message"]
    r = await ask(app, {"messages": [{"role": "user", "content": "y" * 5000}], "tools": tools})
    assert r.status_code == 400 and "context limit" in r.json()["error"]["message"]
    r = await ask(app, {"messages": USER, "tools": tools, "tool_choice": "none"})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "plain words"


def test_deployed_server_refuses_to_run_without_a_key(monkeypatch):
    from actors.serve.app import OrchestraServer

    monkeypatch.delenv("ORCHESTRA_API_KEYS", raising=False)
    built = []
    with pytest.raises(ValueError, match="no API keys"):
        OrchestraServer({}, builder=built.append)
    assert built == []  # nothing is loaded for a server that may not run
    monkeypatch.setenv("ORCHESTRA_API_KEYS", "k1")
    OrchestraServer({}, builder=built.append)
    assert len(built) == 1
