"""Serve's router mode (`policy: router`): the estimator router in front of one's own models, one expert call per
request, through the real app (create_api over an ASGI transport, no Ray) and OpenAI-compatible experts on a fake
server on 127.0.0.1 that streams its replies word by word.

The router is the toy of tests/orchestra/routing/test_estimator.py, fitted on synthetic outcomes with known
probabilities: tier answer-1 (strong, right 0.95, $0.02) and answer-2 (cheap, right 0.9 on "easy" problems and 0.3
on "hard" ones, $0.0001). On a hard problem accuracy-first pays for answer-1, cost-first does not.
"""

from __future__ import annotations

import json

import httpx
import pytest

from actors.serve.api import settings_from_dict
from actors.serve.http import create_api
from actors.serve.service import OrchestraService
from actors.serve.wiring import router_engine
from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.preferences import preset
from orchestra.routing.router import EstimatorRouter
from orchestra.types import Task
from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
from tests.orchestra.routing.test_estimator import embed, fitted
from tests.tools.experts.test_openai import DROP, FakeOpenAI
from tools.base import LocalToolClient
from tools.experts.openai import OpenAIExpert
from tools.orchestra_tools import AnswerTool
from tools.pricing import PriceTable

TIERS = {"answer-1": "big", "answer-2": "small"}
REPLY = "Seven times six is \\boxed{42}"
HARD = "hard question: what is 6*7?"


@pytest.fixture(scope="module")
def router() -> EstimatorRouter:
    est, feats, _tasks = fitted()
    return EstimatorRouter(est, feats, cost_scale=0.01, latency_scale=10.0)


@pytest.fixture
def fake():
    server = FakeOpenAI()
    server.script = [(200, REPLY, 0.0)]
    yield server
    server.close()


def service(router: EstimatorRouter, fake: FakeOpenAI, threshold: float | None = None,
            tiers: tuple[str, ...] = ()) -> OrchestraService:
    """Router mode over two OpenAI-compatible experts on the fake server (told apart by the model they ask for)."""
    tok = ByteTokenizer()
    experts = {name: OpenAIExpert(name, model, PriceTable(), base_url=fake.url, retries=1, backoff_s=0.01,
                                  timeout_s=5.0, max_tokens=64)
               for name, model in (("big", "gpt-5"), ("small", "gpt-5-mini"))}
    loop = AgentLoop(ScriptedEngine(tok, [call_text("answer", model="answer-2")]),  # replaced per request
                     LocalToolClient({"answer": AnswerTool(experts, TIERS)}), Prompter(tok),
                     eos_token_ids=[tok.eos_token_id], max_turns=4)
    return OrchestraService(loop, ["answer"], TIERS, router=router.single_caller(tok, tok.eos_token_id, TIERS,
                                                                                   list(tiers), threshold))


async def post(svc: OrchestraService, body: dict) -> httpx.Response:
    transport = httpx.ASGITransport(app=create_api(svc))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.post("/v1/chat/completions", json=body)


def ask(problem: str, preference: str = "balanced", **extra) -> dict:
    return {"messages": [{"role": "user", "content": problem}], "preference": preference, **extra}


def task(problem: str, pref: str = "balanced") -> Task:
    return Task(id="t", problem=problem, answer="", model_mapping=dict(TIERS), pref=preset(pref))


# ---------------------------------------------------------------- one call, the estimates, the reply
async def test_one_expert_call_per_request_with_the_estimates_in_the_response(router, fake):
    r = await post(service(router, fake), ask(HARD, "accuracy-first"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(fake.requests) == 1 and fake.requests[0]["model"] == "gpt-5"  # one HTTP request, to the chosen model
    o = body["orchestra"]
    assert o["policy"] == "router" and o["turns"] == 1 and len(o["trace"]) == 1
    route = o["router"]
    assert (route["tier"], route["model"], route["rule"]) == ("answer-1", "big", "preference")
    cands = {c["tier"]: c for c in route["candidates"]}
    assert set(cands) == {"answer-1", "answer-2"} and cands["answer-2"]["model"] == "small"
    for c in cands.values():
        assert 0 < c["p_correct"] < 1 and c["cost_usd"] >= 0 and c["latency_s"] >= 0
    assert cands["answer-1"]["cost_usd"] > 10 * cands["answer-2"]["cost_usd"]  # the toy's prices, as estimated
    assert max(cands, key=lambda t: cands[t]["expected_reward"]) == "answer-1"
    assert body["choices"][0]["message"]["content"] == REPLY  # the expert's reply, as it wrote it
    assert o["cost_usd"] == pytest.approx(PriceTable().cost("gpt-5", 120, 30))  # the server's usage x price


async def test_a_failed_call_is_not_followed_by_a_second_one(router, fake):
    fake.script = [(400, "model does not exist", 0.0)]  # final: neither retried nor replaced by another tier
    body = (await post(service(router, fake), ask(HARD, "accuracy-first"))).json()
    assert len(fake.requests) == 1 and body["orchestra"]["termination"] == "max_turns"
    assert "model does not exist" in body["orchestra"]["trace"][0]["error"]
    assert body["choices"][0]["finish_reason"] == "length"


# ---------------------------------------------------------------- how the tier is chosen
async def test_the_tier_follows_the_preference(router, fake):
    svc = service(router, fake)
    tiers = [(await post(svc, ask(HARD, pref))).json()["orchestra"]["router"]["tier"]
             for pref in ("accuracy-first", "cost-first")]
    assert tiers == ["answer-1", "answer-2"]
    assert [r["model"] for r in fake.requests] == ["gpt-5", "gpt-5-mini"]
    # the same choice as the full estimator restricted to `answer <tier>` plans
    plans = router.single_call_plans()
    for pref in ("accuracy-first", "balanced", "cost-first"):
        for problem in (HARD, "easy question: 2+2?"):
            t = task(problem, pref)
            assert router.pick_single(t, plans).tier == router.plan(t).calls[-1][1]


def test_the_threshold_moves_the_choice_monotonically(router):
    plans = router.single_call_plans(["answer-1", "answer-2"])  # [strong, weak]
    problems = [f"{kind} question {i}" for i in range(3) for kind in ("easy", "hard")]
    grid = [-1.0, -0.5, 0.0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]
    strong = []
    for th in grid:
        picks = [router.pick_single(task(p), plans, th) for p in problems]
        assert all(k.rule == "threshold" and k.margin == pytest.approx(k.estimates["answer-1"]["p_correct"]
                                                                      - k.estimates["answer-2"]["p_correct"])
                   for k in picks)
        strong.append({p for p, k in zip(problems, picks, strict=True) if k.tier == "answer-1"})
    assert all(later <= earlier for earlier, later in zip(strong, strong[1:], strict=False))  # nested, shrinking
    assert strong[0] == set(problems) and strong[-1] == set()
    assert any(0 < len(s) < len(problems) for s in strong)  # hard problems go strong longer than easy ones
    assert {p for s in strong[5:7] for p in s} <= {p for p in problems if p.startswith("hard")}
    # the threshold replaces the preference: cost-first still gets the strong model below the margin
    assert router.pick_single(task(HARD, "cost-first"), plans, 0.0).tier == "answer-1"


async def test_the_threshold_through_the_app(router, fake):
    low = (await post(service(router, fake, 0.1, ("answer-1", "answer-2")), ask(HARD, "cost-first"))).json()
    high = (await post(service(router, fake, 0.9, ("answer-1", "answer-2")), ask(HARD, "cost-first"))).json()
    assert [x["orchestra"]["router"]["tier"] for x in (low, high)] == ["answer-1", "answer-2"]
    assert low["orchestra"]["router"]["threshold"] == 0.1 and 0.1 < low["orchestra"]["router"]["margin"] < 0.9
    assert len(fake.requests) == 2


# ---------------------------------------------------------------- refused configurations
def test_an_unknown_or_unserved_tier_is_an_error(router, tmp_path, monkeypatch):
    tok = ByteTokenizer()
    with pytest.raises(ValueError, match="answer-9"):
        router.single_caller(tok, tok.eos_token_id, TIERS, ["answer-9"])
    with pytest.raises(ValueError, match=r"\['answer-1'\] are not served"):  # the run has no expert for answer-1
        router.single_caller(tok, tok.eos_token_id, {"answer-2": "small"})
    router.single_caller(tok, tok.eos_token_id, {"answer-2": "small"}, ["answer-2"])  # chosen away: fine
    with pytest.raises(ValueError, match="two tiers"):
        router.single_caller(tok, tok.eos_token_id, TIERS, ["answer-1"], threshold=0.2)
    # the Serve wiring: settings refused before anything loads, then the router from a run dir
    for bad in ({"policy": "router", "router_threshold": 0.2}, {"policy": "router", "router_tiers": ["a", "b"],
                "router_threshold": 1.5}, {"policy": "estimator", "router_tiers": ["answer-1"]},
                {"policy": "router", "router_tiers": ["answer-1", "answer-1"]}):
        with pytest.raises(ValueError, match="router_t"):
            settings_from_dict(bad)
    router.save(tmp_path)
    monkeypatch.setattr("tools.retrieval.dense.embed_texts", lambda _model_dir, _dtype: embed)  # no MiniLM load here
    settings = settings_from_dict({"policy": "router", "router": str(tmp_path), "router_tiers": ["answer-9"]})
    with pytest.raises(ValueError, match="answer-9"):
        router_engine(settings, tok, [tok.eos_token_id], TIERS)
    settings = settings_from_dict({"policy": "router", "router": str(tmp_path)})
    with pytest.raises(ValueError, match="not served"):
        router_engine(settings, tok, [tok.eos_token_id], {"answer-1": "big"})
    engine = router_engine(settings, tok, [tok.eos_token_id], TIERS)(task(HARD, "cost-first"))
    assert engine.route["tier"] == "answer-2" and engine.route["model"] == "small"


# ---------------------------------------------------------------- streaming
def events(text: str) -> list[dict | str]:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def test_the_experts_tokens_are_the_streamed_content(router, fake):
    r = await post(service(router, fake), ask(HARD, "accuracy-first", stream=True))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    ev = events(r.text)
    assert ev[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in ev[:-1] if e["choices"]]
    content = [d["content"] for d in deltas if d.get("content")]
    assert len(content) == len(REPLY.split(" ")) and "".join(content) == REPLY  # piece by piece, once
    steps = [e.get("orchestra", {}).get("step") or ("content" if e["choices"][0]["delta"].get("content") else None)
             for e in ev[:-1]]
    # relayed while the call ran: after the tool call was announced, before its observation came back
    first, last = steps.index("content"), len(steps) - 1 - steps[::-1].index("content")
    assert steps.index("tool_call") < first and last < steps.index("observation")
    final = ev[-2]
    assert final["choices"][0]["finish_reason"] == "stop" and final["orchestra"]["router"]["tier"] == "answer-1"
    assert len(fake.requests) == 1 and fake.requests[0]["stream"] is True


async def test_a_stream_that_broke_after_relaying_is_not_retried(router, fake):
    fake.script = [(DROP, "one two three four", 0.0), (200, REPLY, 0.0)]
    r = await post(service(router, fake), ask(HARD, "accuracy-first", stream=True))
    ev = events(r.text)
    content = "".join(e["choices"][0]["delta"].get("content") or "" for e in ev[:-1] if e["choices"])
    assert content == "one two" and len(fake.requests) == 1  # the retry's text is never spliced onto it
    final = ev[-2]["orchestra"]
    assert final["termination"] == "max_turns" and "not retried" in final["trace"][0]["error"]
    assert final["cost_usd"] > 0  # the broken attempt's output is billed


# ---------------------------------------------------------------- route hints for a served policy
def test_a_served_policy_trained_on_route_hints_reads_its_runs_router(router, tmp_path, monkeypatch):
    """agent.route_hints: each request's task gets the run's router's estimates, so the model's prompt shows the
    router's suggestion under the request's own preference; no router under the checkpoint is refused."""
    from actors.serve.api import ChatRequest
    from actors.serve.wiring import hint_attacher
    from orchestra.agent.hints import HINT_KEY, hint_text

    monkeypatch.setattr("tools.retrieval.dense.embed_texts", lambda _model_dir, _dtype: embed)
    with pytest.raises(ValueError, match="route_hints"):
        hint_attacher(settings_from_dict({"checkpoint": str(tmp_path / "none")}))
    router.save(tmp_path)
    tok = ByteTokenizer()
    loop = AgentLoop(ScriptedEngine(tok, [call_text("answer", model="answer-2")]), LocalToolClient({}),
                     Prompter(tok, route_hints=True), eos_token_ids=[tok.eos_token_id])
    svc = OrchestraService(loop, ["answer"], TIERS,
                           annotate=hint_attacher(settings_from_dict({"checkpoint": str(tmp_path)})))
    shown = {}
    for pref in ("accuracy-first", "cost-first"):
        t = svc.plan(ChatRequest.model_validate(ask(HARD, pref))).task
        assert HINT_KEY in t.meta
        shown[pref] = hint_text(t)
        assert loop.prompter.first_messages(t)[1]["content"].endswith(shown[pref])
    # the same estimates, read under each request's preference: the strong tier first, the cheap one last
    assert shown["accuracy-first"].endswith("): answer answer-1.")
    assert shown["cost-first"].endswith("): answer answer-2.")


# ---------------------------------------------------------------- the cascade router (issue 51)
CASCADE_TIERS = {"answer-1": "big", "answer-2": "small", "answer-3": "mid"}


@pytest.fixture(scope="module")
def cascade_router() -> EstimatorRouter:
    """The toy plus a mid tier and the cascade small&mid>big: right 0.93 on hard questions at a tenth of big's $."""
    import random

    from orchestra.routing.estimator import RouteEstimator, TaskFeatures
    from orchestra.routing.plans import Outcome, Plan

    rng = random.Random(0)
    plans = [Plan(t, (("answer", t),)) for t in ("answer-1", "answer-2", "answer-3")]
    plans.append(Plan("answer-2&answer-3>answer-1", (("consult", "answer-2"), ("consult", "answer-3"),
                                                     ("answer", "answer-1"))))
    right = {"answer-1": (0.95, 0.95), "answer-2": (0.9, 0.3), "answer-3": (0.9, 0.5),
             "answer-2&answer-3>answer-1": (0.93, 0.93)}
    cost = {"answer-1": 0.02, "answer-2": 0.0001, "answer-3": 0.0005, "answer-2&answer-3>answer-1": 0.002}
    tasks = [Task(id=f"c{i}", problem=f"{'easy' if i % 2 == 0 else 'hard'} question {i}", answer="x")
             for i in range(300)]
    outcomes = [Outcome(t.id, p.name, rng.random() < right[p.name][t.problem.startswith("hard")], cost[p.name], 1.0)
                for t in tasks for p in plans]
    feats = TaskFeatures(embed)
    est = RouteEstimator(plans, C=10.0, select=False).fit(feats(tasks), [t.id for t in tasks], outcomes)
    return EstimatorRouter(est, feats, cost_scale=0.01, latency_scale=10.0)


async def test_the_cascade_router_consults_two_and_escalates_only_on_disagreement(cascade_router, fake):
    from tools.orchestra_tools import ConsultTool, SubmitTool

    tok = ByteTokenizer()
    experts = {name: OpenAIExpert(name, model, PriceTable(), base_url=fake.url, retries=1, backoff_s=0.01,
                                  timeout_s=5.0, max_tokens=64)
               for name, model in (("big", "gpt-5"), ("small", "gpt-5-mini"), ("mid", "gpt-4.1-mini"))}
    tools = {"answer": AnswerTool(experts, CASCADE_TIERS), "consult": ConsultTool(experts, CASCADE_TIERS),
             "submit": SubmitTool(CASCADE_TIERS)}
    loop = AgentLoop(ScriptedEngine(tok, ["unused"]), LocalToolClient(tools), Prompter(tok),
                     eos_token_ids=[tok.eos_token_id], max_turns=4)
    svc = OrchestraService(loop, list(tools), CASCADE_TIERS, router=cascade_router.single_caller(
        tok, tok.eos_token_id, CASCADE_TIERS, cascades=True))
    fake.script = [(200, REPLY, 0.0)]  # both cheap experts say 42: they agree, nothing escalates
    agree = (await post(svc, ask(HARD, "accuracy-first"))).json()["orchestra"]
    assert (agree["router"]["tier"], agree["router"]["kind"]) == ("answer-2&answer-3>answer-1", "cascade")
    assert agree["router"]["models"] == {"answer-2": "small", "answer-3": "mid", "answer-1": "big"}
    assert [s["tool"] for s in agree["trace"]] == ["consult", "consult", "submit"]
    assert [s["candidate"] for s in agree["trace"][:2]] == ["42", "42"]
    assert [r["model"] for r in fake.requests] == ["gpt-5-mini", "gpt-4.1-mini"]
    fake.requests.clear()
    fake.script = [(200, REPLY, 0.0), (200, "It is \\boxed{41}", 0.0), (200, REPLY, 0.0)]  # they differ: escalate
    differ = (await post(svc, ask(HARD, "accuracy-first"))).json()["orchestra"]
    assert [s["tool"] for s in differ["trace"]] == ["consult", "consult", "answer"]
    assert [r["model"] for r in fake.requests] == ["gpt-5-mini", "gpt-4.1-mini", "gpt-5"]
    assert differ["cost_usd"] > agree["cost_usd"]
    # without consult / submit served, or under a threshold, the router keeps to single calls
    single = cascade_router.single_caller(tok, tok.eos_token_id, CASCADE_TIERS)
    assert single(task(HARD, "accuracy-first")).route.get("kind") is None
