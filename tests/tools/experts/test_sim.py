"""SimExpert (SIMULATED experts): determinism, calibration of P(correct), context boost, wrong answers,
virtual vs slept latency, and that the default sim zoo makes routing matter (no expert best everywhere)."""

from __future__ import annotations

import math
import time

import pytest

from orchestra.config import load_config
from orchestra.types import Task, ToolContext
from tools.experts.sim import SimExpert, perturb_code, wrong_answer
from tools.pricing import PriceTable
from tools.registry import build_experts

FAMILIES = ("arith", "lookup", "reasoning", "code")


@pytest.fixture(scope="module")
def zoo():
    return load_config().zoo


@pytest.fixture(scope="module")
def experts(zoo):
    return build_experts(zoo)


def _task(i: int, family: str = "arith", difficulty: int = 1, answer: str = "42", **meta) -> Task:
    return Task(id=f"t{i}", problem=f"Problem number {i} about {family}", answer=answer,
                meta={"family": family, "difficulty": difficulty, **meta})


async def test_replies_are_deterministic_and_labelled_simulated(experts):
    expert = experts["gpt-5-mini"]
    ctx = ToolContext(task=_task(1, "lookup", 2))
    a = await expert.complete("q", None, ctx)
    b = await expert.complete("q", None, ctx)
    assert a == b and a.meta["simulated"] is True and "SIMULATED" in SimExpert.__doc__
    assert 0 < a.tokens_out <= expert.max_tokens and a.cost_usd == pytest.approx(expert.cost(a.tokens_in, a.tokens_out))
    # a rebuilt zoo (e.g. inside another process) gives the same draws: no dependence on hash() seeds
    again = build_experts(load_config().zoo)["gpt-5-mini"]
    assert (await again.complete("q", None, ctx)) == a
    # attempts draw independently: over many tasks, attempt 0 and 1 disagree sometimes
    outcomes = [[(await expert.complete("q", None, ToolContext(task=_task(i, "lookup", 2), attempt=k)))
                 .meta["sim_correct"] for k in (0, 1)] for i in range(200)]
    assert any(x != y for x, y in outcomes)


@pytest.mark.parametrize("name,family,difficulty", [("gpt-5-mini", "lookup", 1), ("qwen3-32b", "reasoning", 2),
                                                    ("llama-3.3-70b", "code", 3)])
async def test_calibration_matches_configured_probability(experts, name, family, difficulty):
    expert = experts[name]
    n = 3000
    hits = 0
    p = None
    for i in range(n):
        ctx = ToolContext(task=_task(i, family, difficulty))
        reply = await expert.complete("q", None, ctx)
        p = reply.meta["p_correct"]
        hits += reply.meta["answer"] == "42"
    assert p == pytest.approx(expert.skill[family] ** (1 + 0.5 * (difficulty - 1)))
    assert abs(hits / n - p) < 4 * math.sqrt(p * (1 - p) / n)


async def test_difficulty_lowers_and_context_raises_p(experts):
    expert = experts["llama-3.3-70b"]
    ps = [expert.p_correct(ToolContext(task=_task(0, "lookup", d))) for d in (1, 2, 3)]
    assert ps[0] > ps[1] > ps[2]
    bare = expert.p_correct(ToolContext(task=_task(0, "lookup", 3, answer="Paris")))
    docs = ToolContext(task=_task(0, "lookup", 3, answer="Paris"), documents=["The capital of France is Paris."])
    code = ToolContext(task=_task(0, "lookup", 3, answer="Paris"), code_outputs=["paris\n"])
    assert expert.p_correct(docs) == expert.p_correct(code) > bare + 0.3
    hits = sum([(await expert.complete("q", None, ToolContext(task=_task(i, "lookup", 3, answer="Paris"),
                                                               documents=["... Paris ..."]))).meta["sim_correct"]
                for i in range(1000)])
    assert abs(hits / 1000 - expert.p_correct(docs)) < 0.06


def test_wrong_answers_are_plausible_and_never_gold():
    for i in range(200):
        assert wrong_answer("42", None, i) != "42" and wrong_answer("42", None, i).lstrip("-").isdigit()
        assert wrong_answer("3.5", None, i) != "3.5"
        assert wrong_answer("C", None, i) in "ABDEFGHIJ"
        assert wrong_answer("Paris", ["paris", "Lyon", "Nice"], i) in ("Lyon", "Nice")
        assert wrong_answer("New York City", None, i) != "New York City"
    code = "x = 6\nprint(x * 7)"
    assert perturb_code(code, 1) != code


async def test_code_and_query_purposes(experts):
    expert = experts["qwen2.5-coder-32b"]
    task = _task(5, "code", 1, code="print(6 * 7)")
    texts = {(await expert.complete("q", None, ToolContext(task=_task(i, "code", 1, code="print(6 * 7)")),
                                    purpose="code")).text for i in range(40)}
    assert any("print(6 * 7)" in t for t in texts) and any("print(6 * 7)" not in t for t in texts)
    query = await expert.complete("q", None, ToolContext(task=task), purpose="query")
    assert query.text.startswith("<query>") and "answer" not in query.meta


async def test_latency_virtual_by_default_and_slept_on_request():
    prices = PriceTable({"m": (0.1, 0.1)})
    virtual = SimExpert("m", "m", prices, skill={"arith": 0.5}, latency_s=5.0)
    start = time.perf_counter()
    reply = await virtual.complete("q", None, ToolContext(task=_task(1)))
    assert reply.latency_s > 3.0 and time.perf_counter() - start < 0.5
    slept = SimExpert("m", "m", prices, skill={"arith": 0.5}, latency_s=0.2, sleep=True)
    start = time.perf_counter()
    reply = await slept.complete("q", None, ToolContext(task=_task(1)))
    assert time.perf_counter() - start >= reply.latency_s * 0.95


def test_routing_matters_in_the_default_sim_zoo(experts):
    """With cost counted (accuracy - lam * expected $), the best expert differs across families."""
    for lam in (10.0, 30.0, 100.0):
        best = {}
        for family in FAMILIES:
            def utility(e, family=family, lam=lam):
                p = e.skill[family] ** 1.5  # difficulty 2
                return p - lam * e.cost(300, e.tokens_out)
            best[family] = max(experts.values(), key=utility).name
        assert len(set(best.values())) >= 3, (lam, best)
    # and the strongest expert is never the cheapest one
    strongest = max(experts.values(), key=lambda e: sum(e.skill[f] for f in FAMILIES))
    cheapest = min(experts.values(), key=lambda e: e.cost(300, e.tokens_out))
    assert strongest.name != cheapest.name
