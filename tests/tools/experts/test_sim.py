"""SimExpert (SIMULATED experts): determinism, calibration of P(correct), context boost, wrong answers,
virtual vs slept latency, that the default sim zoo makes routing matter (no expert best everywhere), replies for
tasks with a gold answer pinned, and what they do for served questions (no gold answer)."""

from __future__ import annotations

import hashlib
import json
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


# Template tasks as orchestra/data/synth/template.py wrote them (one per family), plus a plain arithmetic one.
GOLD_TASKS = [
    {"id": "train-arith-0-00000", "problem": "Cleo has 4 boxes of 10 apples, buys 15 more and gives away 20. How "
     "many apples are left?", "answer": "35", "meta": {"family": "arith", "difficulty": 2, "distractors": ["36", "34",
     "40"], "kind": "boxes", "split": "train", "code": "print((4*10+15)-20)"}},
    {"id": "train-lookup-0-00001", "problem": "In which city was the person who founded The Branvel company born?",
     "answer": "Nalmorholm", "meta": {"family": "lookup", "difficulty": 2, "distractors": ["Tracaiholm",
     "Prypryville", "Zenzenport"], "kind": "hop2", "split": "train", "doc_ids": ["w:the-branvel-company",
     "w:caiost-kelmor"]}},
    {"id": "train-reasoning-0-00002", "problem": "Puzzle: Ivo is older than Cleo. Lena is older than Ivo. Zed is "
     "older than Lena. Yara is older than Zed. Who is the youngest?", "answer": "Cleo", "meta": {"family":
     "reasoning", "difficulty": 2, "distractors": ["Yara", "Zed", "Lena"], "kind": "ordering", "split": "train"}},
    {"id": "train-code-0-00003", "problem": "Code: compute Fibonacci number F(40) with F(0)=0, F(1)=1.",
     "answer": "102334155", "meta": {"family": "code", "difficulty": 3, "distractors": ["102334156", "102334154",
     "204668310"], "kind": "fib", "split": "train", "code": "a, b = 0, 1\nfor _ in range(40):\n    a, b = b, a + b"
     "\nprint(a)"}},
    {"id": "t-17x23", "problem": "What is 17 * 23?", "answer": "391", "meta": {"family": "arith"}},
]


async def test_replies_for_tasks_with_a_gold_answer_are_unchanged():
    """Training and evaluation see exactly the replies they saw before served questions got their own: 360 replies
    (5 tasks x 3 contexts x 2 experts x 3 purposes x 4 attempts), hashed. The digest was computed with the code
    before that change; it moves only if simulated replies to gold-answer tasks change, which changes training."""
    prices = PriceTable({"big": (1.25, 10.0), "small": (0.04, 0.12)})
    sims = [SimExpert("big", "big", prices, skill={"arith": 0.97, "lookup": 0.75, "default": 0.9}, tokens_out=900,
                      latency_s=9.0, seed=3),
            SimExpert("small", "small", prices, skill={"arith": 0.9, "code": 0.3, "default": 0.2}, tokens_out=400,
                      latency_s=1.0)]
    out = []
    for spec in GOLD_TASKS:
        task = Task(**spec)
        for ctx_kw in ({}, {"documents": [f"... {task.answer} ..."]}, {"code_outputs": ["7\n", task.answer + "\n"]}):
            for e in sims:
                for purpose in ("query", "code", "answer"):
                    for attempt in range(4):
                        r = await e.complete([{"role": "user", "content": task.problem}], None,
                                             ToolContext(task=task, attempt=attempt, **ctx_kw), purpose=purpose)
                        out.append([r.text, r.tokens_in, r.tokens_out, r.latency_s, r.cost_usd, r.error,
                                    sorted(r.meta.items())])
    assert out[1][0] == "<query>Cleo has 4 boxes of 10 apples, buys 15 more and gives away 20. How many apples are left?</query>"
    digest = hashlib.blake2b(json.dumps(out).encode(), digest_size=16).hexdigest()
    assert (len(out), digest) == (360, "f4d12f85fdc3d3f7eee4dc26bd3afaf8")


def _served(problem: str) -> Task:
    return Task(id="chatcmpl-1", problem=problem, answer="", data_source="serve", meta={"source": "serve"})


async def test_served_coder_writes_the_arithmetic_or_says_it_cannot(experts):
    coder = experts["qwen2.5-coder-32b"]
    reply = await coder.complete("q", None, ToolContext(task=_served("What is 17 * 23?")), purpose="code")
    assert "```python\nprint(17 * 23)\n```" in reply.text
    assert reply.meta["simulated"] is True and "sim_correct" not in reply.meta and reply.cost_usd > 0
    other = await coder.complete("q", None, ToolContext(task=_served("Who wrote Hamlet?")), purpose="code")
    assert "print('a simulated expert cannot derive this" in other.text


async def test_served_answerer_repeats_the_latest_tool_output_or_says_it_does_not_know(experts):
    answerer = experts["gpt-5"]
    task = _served("What is 17 * 23?")
    bare = await answerer.complete("q", None, ToolContext(task=task))
    assert bare.meta["answer"].startswith("unknown (a simulated expert knows no answer")
    assert "answer_from" not in bare.meta and "sim_correct" not in bare.meta and bare.meta["simulated"] is True
    docs = ToolContext(task=task, documents=["old passage", "17 times 23 is  391."])
    reply = await answerer.complete("q", None, docs)
    assert (reply.meta["answer"], reply.meta["answer_from"]) == ("17 times 23 is 391.", "document")
    both = ToolContext(task=task, documents=["a passage"], code_outputs=["12\n", "working...\n391\n"])
    reply = await answerer.complete("q", None, both)  # a computed result before a passage; its last line
    assert (reply.meta["answer"], reply.meta["answer_from"]) == ("391", "code_output")
    assert "\\boxed{391}" in reply.text and "simulated" in reply.text


async def test_served_arithmetic_runs_in_the_sandbox(zoo):
    """The default zoo end to end: enhance_reasoning's simulated coder writes print(17 * 23), the real sandbox
    prints 391, and the simulated answerer given that output answers 391, saying where it came from."""
    from tools.registry import build_tools
    from tools.sandbox import Sandbox

    missing = Sandbox().shortfall
    if missing:
        pytest.skip(f"needs bubblewrap and the syscall filter (make setup installs both): {missing}")
    tools = build_tools(zoo, names=["enhance_reasoning", "answer"])
    task = _served("What is 17 * 23?")
    ran = await tools["enhance_reasoning"].call({"model": "reasoner-3"}, ToolContext(task=task))
    assert ran.ok and ran.meta["code"] == "print(17 * 23)" and ran.code_output.strip() == "391"
    assert ran.meta["simulated"] is True
    answered = await tools["answer"].call({"model": "answer-4"}, ToolContext(task=task, code_outputs=[ran.code_output]))
    assert answered.answer == "391" and answered.meta["answer_from"] == "code_output"
