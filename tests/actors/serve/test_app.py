"""The Serve endpoint end to end: Ray Serve on 127.0.0.1 (one start per module, free port), real HTTP.

Apps deployed once for the module:
- "/"      scripted policy (byte tokenizer + the real agent loop, chat template and parser; replies chosen by a
           seeded script from the prompt) with the simulated zoo's tools in-process; auth on, generous rate limit.
- "/tight" the scripted policy with its tools behind tool-server actors (RayToolClient) and a tight rate limit
           (the 429 path).
- "/tiny"  the production builder: the tiny model (orchestra.policy.models) + HF engine + simulated zoo tools.
The scripted policy is a test double (labelled so); budget and fuzz runs need many fast requests.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import sys

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KEY = "sk-test-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
USER = [{"role": "user", "content": "direct: what is 2 + 2?"}]
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "weather for a city",
                                                 "parameters": {"type": "object", "properties": {
                                                     "city": {"type": "string"}}, "required": ["city"]}}}
TIERS = {"search": ["search-1", "search-2", "search-3"], "enhance_reasoning": ["reasoner-1", "reasoner-2", "reasoner-3"],
         "answer": ["answer-1", "answer-2", "answer-3", "answer-4", "answer-math-1", "answer-math-2"]}


# ---------------------------------------------------------------- replica-side builders (pickled by value)
def scripted_policy(prompt: str) -> str:
    """A seeded stand-in for a trained policy: picks tool calls (or garbage) from the problem and the turn."""
    def call(name: str, **args) -> str:
        return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'

    if "<tools>" in prompt and "get_weather" in prompt:  # raw mode
        if "<tool_response>" in prompt:
            return "It is sunny in Paris."
        asked = prompt.split("</tools>")[-1]
        return call("get_weather", city="Paris") if "weather" in asked else "Hello! No tool needed."
    problems = re.findall(r"Problem: (.*)", prompt)
    problem = problems[-1] if problems else ""
    if problem.startswith("direct:"):
        return call("answer", model="answer-4")
    state = len(re.findall(r"\[(?:Attempt|Document|Output) ", prompt))
    rng = random.Random(f"{problem}|{state}")
    roll = rng.random()
    if roll < 0.1:
        return "I am not sure what to do."  # a format error the loop must survive
    tool = "answer" if roll > 0.75 else rng.choice(["search", "enhance_reasoning"])
    return call(tool, model=rng.choice(TIERS[tool]))


def scripted_service(settings, tools_mode: str = "local"):
    from actors.serve.service import OrchestraService
    from actors.serve.wiring import _tool_client
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from orchestra.config import load_config
    from tests.helpers.fakes import ByteTokenizer, ScriptedEngine

    cfg = load_config([f"experiment={settings.experiment}", *settings.overrides])
    tok = ByteTokenizer()
    settings.tools = tools_mode
    tools = _tool_client(settings, cfg)  # the simulated zoo: real cost bounds (max_tokens x price)
    loop = AgentLoop.from_config(cfg.agent, ScriptedEngine(tok, scripted_policy), tools, Prompter(tok),
                                 eos_token_ids=[tok.eos_token_id])
    return OrchestraService(loop, list(cfg.zoo.tools), dict(cfg.zoo.tiers), model_id=settings.model_id,
                            max_tokens=400, max_tokens_limit=settings.max_tokens_limit)


def actors_service(settings):
    return scripted_service(settings, "actors")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


APP_ARGS = {"api_keys": [KEY], "max_request_bytes": 65536, "max_tokens_limit": 512, "rate_limit_per_s": 1000,
            "rate_limit_burst": 1000, "overrides": ["agent.max_turns=4"]}


ZOO_READY = _has("tools.registry") and _has("tools.web_search")  # the sim zoo's search falls back to web search
TINY_READY = ZOO_READY and _has("orchestra.policy.models")
ACTORS_READY = ZOO_READY and _has("actors.tool_server")


@pytest.fixture(scope="module")
def base_url(ray_cluster):
    """Serve on a free loopback port with every app deployed at once (replicas start in parallel)."""
    from ray import cloudpickle, serve
    from ray.serve.api import RunTarget

    from actors.serve.app import deployment

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    dep = deployment(ray_actor_options={"num_cpus": 0.1}, max_ongoing_requests=64)
    # "/tight" (rate limited) doubles as the tool-server-actor app: one replica fewer to start
    tight = {**APP_ARGS, "rate_limit_per_s": 0.1, "rate_limit_burst": 3,
             "overrides": ["agent.max_turns=4", "zoo.tools=[answer]"]}  # one tool-server actor is enough
    targets = [RunTarget(dep.bind(APP_ARGS, scripted_service), name="main", route_prefix="/"),
               RunTarget(dep.bind(tight, actors_service if ACTORS_READY else scripted_service), name="tight",
                         route_prefix="/tight")]
    if TINY_READY:  # the production builder: tiny model + HF engine + simulated zoo
        tiny = {**APP_ARGS, "overrides": ["sampling.max_tokens=24", "agent.max_turns=2", "sampling.temperature=0"]}
        targets.append(RunTarget(dep.bind(tiny), name="tiny", route_prefix="/tiny"))
    try:
        serve.run_many(targets)
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client(base_url):
    with httpx.Client(base_url=base_url, timeout=60) as c:
        yield c


def post(client, body, headers=AUTH, path="/v1/chat/completions"):
    return client.post(path, json=body, headers=headers)


def sse_events(text: str) -> list:
    lines = [ln[len("data: "):] for ln in text.split("\n\n") if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(x) for x in lines[:-1]]


# ---------------------------------------------------------------- the happy paths
def test_production_builder_serves_the_tiers_the_policy_was_trained_with(monkeypatch):
    """cpu_tiny trains on data.tiers (six of the zoo's twelve tiers, some mapped to other experts): a served
    task's model_mapping must be those, or the policy meets a catalogue it never saw and its answer-4 reaches
    another expert. The model is stubbed: this checks the wiring only."""
    from types import SimpleNamespace

    import orchestra.policy.models as models
    from actors.serve.api import settings_from_dict
    from actors.serve.wiring import build_service
    from orchestra.config import load_config
    from orchestra.engine.hf import HFEngine
    from tests.helpers.fakes import ByteTokenizer

    monkeypatch.setattr(models, "load_policy", lambda *a, **k: (SimpleNamespace(device="cpu"), ByteTokenizer()))
    monkeypatch.setattr(HFEngine, "from_model", classmethod(lambda cls, *a, **k: None))
    service = build_service(settings_from_dict({"checkpoint": "", "api_keys": [KEY]}))
    cfg = load_config()
    assert service.tiers == dict(cfg.data.tiers) and service.tiers["answer-4"] != cfg.zoo.tiers["answer-4"]


def test_completion_runs_the_agent_loop(client):
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/v1/models", headers=AUTH).json()["data"][0]["id"] == "orchestra"
    r = post(client, {"model": "orchestra", "messages": USER, "preference": "cost-first", "budget": {"usd": 1.0}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    ext = body["orchestra"]
    assert ext["termination"] == "answered" and choice["finish_reason"] == "stop"
    assert ext["preference"]["cost"] == 2.0 and ext["budget"]["usd"] == 1.0
    assert [t["tier"] for t in ext["trace"]] == ["answer-4"] and ext["trace"][0]["tool"] == "answer"
    assert ext["cost_usd"] == pytest.approx(sum(t["cost_usd"] for t in ext["trace"]))
    assert ext["cost_usd"] > 0  # the simulated expert charged for its tokens
    use = body["usage"]
    assert use["prompt_tokens"] > 0 and use["completion_tokens"] > 0
    assert use["total_tokens"] == use["prompt_tokens"] + use["completion_tokens"]


def test_streaming_one_chunk_per_step(client):
    body = {"messages": [{"role": "user", "content": "stream me: route 7"}], "stream": True,
            "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body, headers=AUTH) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = sse_events(r.read().decode())
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    steps = [e["orchestra"]["step"] for e in events if "step" in e.get("orchestra", {})]
    final = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(final) == 1
    trace = final[0]["orchestra"]["trace"]
    assert steps.count("tool_call") == len(trace) and steps.count("observation") == len(trace)
    content = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    assert content  # the answer, or what the episode gathered before it stopped
    assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] > 0
    assert all(e["object"] == "chat.completion.chunk" and e["id"] == events[0]["id"] for e in events)


def test_raw_mode_returns_openai_tool_calls(client):
    r = post(client, {"messages": [{"role": "user", "content": "what is the weather in Paris?"}],
                      "tools": [WEATHER_TOOL]})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert "orchestra" not in r.json()  # a plain model endpoint: no server-side loop ran
    # the client's own loop continues: its tool result goes back through the same template
    follow = [{"role": "user", "content": "weather in Paris?"}, {"role": "assistant", "content": None,
                                                                "tool_calls": [call]},
              {"role": "tool", "tool_call_id": call["id"], "content": "sunny"}]
    r2 = post(client, {"messages": follow, "tools": [WEATHER_TOOL]})
    assert r2.status_code == 200, r2.text
    assert r2.json()["choices"][0]["message"]["content"] == "It is sunny in Paris."
    r2 = post(client, {"messages": [{"role": "user", "content": "hi"}], "tools": [WEATHER_TOOL]})
    assert r2.json()["choices"][0] == {"index": 0, "message": {"role": "assistant", "content": "Hello! No tool needed."},
                                       "logprobs": None, "finish_reason": "stop"}
    with client.stream("POST", "/v1/chat/completions", headers=AUTH,
                       json={"messages": [{"role": "user", "content": "weather?"}], "tools": [WEATHER_TOOL],
                             "stream": True}) as r3:
        events = sse_events(r3.read().decode())
    deltas = [e["choices"][0]["delta"] for e in events]
    assert deltas[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert events[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_python_client(base_url):
    """What the README shows: the openai SDK, extensions through extra_body, streaming, raw tool calls."""
    import openai

    oc = openai.OpenAI(base_url=f"{base_url}/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in oc.models.list()] == ["orchestra"]
    out = oc.chat.completions.create(model="orchestra", messages=USER,
                                     extra_body={"preference": "cost-first", "budget": {"usd": 0.5}})
    assert out.choices[0].message.content and out.usage.total_tokens > 0
    assert out.model_extra["orchestra"]["termination"] == "answered"
    parts = [c.choices[0].delta.content or "" for c in oc.chat.completions.create(
        model="orchestra", messages=USER, stream=True) if c.choices]
    assert "".join(parts)  # simulated experts draw per episode, so the two answers may differ
    raw = oc.chat.completions.create(model="orchestra", messages=[{"role": "user", "content": "weather?"}],
                                     tools=[WEATHER_TOOL])
    assert raw.choices[0].message.tool_calls[0].function.name == "get_weather"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{base_url}/v1", api_key="nope", max_retries=0).models.list()


# ---------------------------------------------------------------- refusals
def test_auth_401(client):
    for headers in ({}, {"Authorization": "Bearer wrong-key"}, {"Authorization": f"Basic {KEY}"},
                    {"Authorization": "Bearer"}):
        r = post(client, {"messages": USER}, headers=headers)
        assert r.status_code == 401, headers
        assert r.json()["error"]["type"] == "authentication_error"
        assert KEY not in r.text
    assert client.get("/v1/models").status_code == 401


def test_bad_input_400_and_413(client):
    r = client.post("/v1/chat/completions", content=b'{"messages": [', headers=AUTH)
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    r = post(client, {"messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages.0.role"
    r = post(client, {"messages": USER, "max_tokens": 100_000})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    r = post(client, {"messages": USER, "preference": "cheapest-please"})
    assert r.status_code == 400 and "preset" in r.json()["error"]["message"]
    r = post(client, {"messages": [{"role": "system", "content": "no user here"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = post(client, {"messages": USER, "budget": {"usd": -1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "budget.usd"
    big = {"messages": [{"role": "user", "content": "x" * 70_000}]}
    assert post(client, big).status_code == 413
    chunks = (b"x" * 8192 for _ in range(10))  # no Content-Length: the streamed body is counted
    r = client.post("/v1/chat/completions", content=chunks, headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 413


@pytest.mark.skipif(not ACTORS_READY, reason="needs actors.tool_server and tools.registry")
def test_tools_behind_tool_server_actors(client):
    """Runs before the 429 test: it spends one token of the rate-limited app's bucket."""
    r = post(client, {"messages": USER, "budget": {"usd": 1.0}}, path="/tight/v1/chat/completions")
    assert r.status_code == 200, r.text
    ext = r.json()["orchestra"]
    assert ext["termination"] == "answered" and ext["trace"][0]["tier"] == "answer-4" and ext["cost_usd"] > 0


def test_rate_limit_429(client):
    codes = [post(client, {"messages": USER}, path="/tight/v1/chat/completions").status_code for _ in range(6)]
    assert codes[0] == 200 and codes[-1] == 429 and set(codes) == {200, 429}, codes
    r = post(client, {"messages": USER}, path="/tight/v1/chat/completions")
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1


# ---------------------------------------------------------------- the hard budget
def test_budget_never_exceeded_over_100_random_requests(base_url):
    rng = random.Random(7)
    bodies = [{"messages": [{"role": "user", "content": f"task {i}: which route is best?"}],
               "budget": {"usd": round(rng.uniform(0.0, 0.03), 6), "turns": rng.randint(1, 6)},
               "preference": rng.choice(["balanced", "cost-first", "accuracy-first", "latency-first"])}
              for i in range(100)]

    async def run_all():
        async with httpx.AsyncClient(base_url=base_url, timeout=60, headers=AUTH) as c:
            sem = asyncio.Semaphore(16)

            async def one(body):
                async with sem:
                    return body, await c.post("/v1/chat/completions", json=body)
            return await asyncio.gather(*(one(b) for b in bodies))

    results = asyncio.run(run_all())
    terminations = []
    for body, r in results:
        assert r.status_code == 200, r.text
        ext = r.json()["orchestra"]
        assert ext["cost_usd"] <= body["budget"]["usd"] + 1e-12, (body, ext)
        assert ext["turns"] <= body["budget"]["turns"]
        assert ext["cost_usd"] == pytest.approx(sum(t["cost_usd"] for t in ext["trace"]))
        terminations.append(ext["termination"])
    refused = sum(t["budget_refused"] for _, r in results for t in r.json()["orchestra"]["trace"])
    paid = sum(t["cost_usd"] > 0 for _, r in results for t in r.json()["orchestra"]["trace"])
    # not vacuous: the cap was hit and refused calls, and real paid calls went through
    assert refused >= 5 and paid >= 20 and terminations.count("budget") >= 5, (refused, paid)


# ---------------------------------------------------------------- fuzzing from the request schema
def schema_strategy(schema: dict, defs: dict, depth: int = 0) -> st.SearchStrategy:
    """Hypothesis values for a (pydantic-made) JSON schema; unknown shapes get arbitrary JSON."""
    if "$ref" in schema:
        return schema_strategy(defs[schema["$ref"].split("/")[-1]], defs, depth)
    if "anyOf" in schema:
        return st.one_of([schema_strategy(s, defs, depth) for s in schema["anyOf"]])
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object" and "properties" in schema and depth < 4:
        props = schema["properties"]
        required = set(schema.get("required", []))
        fields = {k: schema_strategy(v, defs, depth + 1) for k, v in props.items()}
        return st.fixed_dictionaries({k: fields[k] for k in required},
                                     optional={k: fields[k] for k in props if k not in required})
    if kind == "array":
        lo, hi = schema.get("minItems", 0), min(schema.get("maxItems", 3), 3)
        return st.lists(schema_strategy(schema.get("items", {}), defs, depth + 1), min_size=min(lo, hi), max_size=hi)
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True)
        return st.text(max_size=40)
    if kind == "integer":
        return st.integers(min_value=schema.get("minimum", -10), max_value=schema.get("maximum", 2**31))
    if kind == "number":
        return st.floats(min_value=-1.0, max_value=10.0, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return JSON


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
_STRATEGIES: dict = {}


def request_strategy(client) -> st.SearchStrategy:
    """Bodies drawn from the request schema the server publishes in /openapi.json, plus the same with one
    top-level field swapped for arbitrary JSON (type confusion at every key), plus arbitrary JSON."""
    if "s" not in _STRATEGIES:
        doc = client.get("/openapi.json").json()
        schema = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        requests = schema_strategy(schema, doc["components"]["schemas"])
        mutated = st.tuples(requests, st.sampled_from(sorted(schema["properties"])), JSON).map(
            lambda t: {**t[0], t[1]: t[2]})
        _STRATEGIES["s"] = st.one_of(requests, mutated, JSON)
    return _STRATEGIES["s"]


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_fuzzed_requests_never_5xx(client, data):
    body = data.draw(request_strategy(client))
    r = client.post("/v1/chat/completions", content=json.dumps(body).encode(), headers=AUTH)
    assert r.status_code < 500, (body, r.text)
    if r.status_code == 200:
        assert r.text.startswith("data: ") or r.json()["choices"][0]["message"]["role"] == "assistant"
    else:
        assert r.json()["error"]["message"]


# ---------------------------------------------------------------- production builder and tool-server actors
@pytest.mark.skipif(not TINY_READY, reason="needs orchestra.policy.models, HFEngine and tools.registry")
def test_tiny_model_with_simulated_zoo(client):
    r = post(client, {"messages": USER, "max_tokens": 16}, path="/tiny/v1/chat/completions")
    assert r.status_code == 200, r.text
    ext = r.json()["orchestra"]
    assert ext["turns"] >= 1 and r.json()["usage"]["completion_tokens"] >= 1
    assert r.json()["choices"][0]["message"]["content"]
    with client.stream("POST", "/tiny/v1/chat/completions", headers=AUTH,
                       json={"messages": USER, "stream": True, "max_tokens": 16}) as rs:
        events = sse_events(rs.read().decode())
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    r = post(client, {"messages": USER, "tools": [WEATHER_TOOL], "max_tokens": 16}, path="/tiny/v1/chat/completions")
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
