"""Cascades (orchestra/routing/cascade.py): the outcome computed offline from one-shot outcomes equals the episode the
agent loop plays with consult / submit on the simulated zoo; the array form equals the per-task form; names parse."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

from orchestra.agent.prompt import Prompter
from orchestra.config import load_config
from orchestra.eval.runner import Evaluator
from orchestra.routing import cascade as cc
from orchestra.routing.plans import Outcome
from orchestra.types import Task, ToolRecord, ToolResult
from reward.score import episode_scorer
from tests.helpers.fakes import ByteTokenizer
from tools.base import LocalToolClient
from tools.registry import build_tools

TOK = ByteTokenizer()
TIERS = ["answer-1", "answer-2", "answer-3", "answer-4"]


def test_names_parse_back_and_hand_cascades_cover_every_pair_and_target():
    for c in (cc.Cascade("pair", ("answer-4", "answer-3"), "answer-1"), cc.Cascade("no_answer", ("answer-2",), "answer-1"),
              cc.Cascade("three", ("answer-4", "answer-3", "answer-2"), "answer-1")):
        assert cc.parse(c.name) == c
    cost = {"answer-1": 4.0, "answer-2": 3.0, "answer-3": 2.0, "answer-4": 1.0}
    hand = cc.hand_cascades(TIERS, cost)
    pairs = [c for c in hand if c.kind == "pair"]
    assert len(pairs) == 6 * 2 and len(hand) - len(pairs) == 6  # 6 pairs x 2 targets; 3 + 2 + 1 no-answer
    assert all(cost[c.consult[0]] < cost[c.consult[1]] for c in pairs)  # the cheaper is consulted first
    with pytest.raises(ValueError, match="not a cascade name"):
        cc.parse("answer-1")


def test_agreement_folds_case_space_and_brackets_and_missing_answers_agree_with_nothing():
    assert cc.agree("(B)", " b ") and cc.agree("Paris", "paris.")
    assert not cc.agree(None, None) and not cc.agree("(no answer recorded)", "(no answer recorded)")
    assert not cc.agree("B", "C")


def test_the_array_form_equals_the_per_task_form():
    rng = random.Random(0)
    cost = {t: 4.0 - i for i, t in enumerate(TIERS)}
    rows, answers = [], []
    for i in range(300):
        row, ans = {}, []
        for t in TIERS:
            a = rng.choice(["A", "B", "C", None])
            row[t] = Outcome(f"t{i}", t, rng.random() < 0.5, cost[t] * (1 + rng.random()), rng.random(), 0, a)
            ans.append(a)
        rows.append(row)
        answers.append(ans)
    codes = cc.answer_codes(answers)
    arr = {k: np.array([[r[t].__dict__[k] for t in TIERS] for r in rows], dtype=float)
           for k in ("correct", "cost_usd", "latency_s")}
    col = {t: j for j, t in enumerate(TIERS)}
    for c in [*cc.hand_cascades(TIERS, cost), cc.Cascade("three", ("answer-4", "answer-3", "answer-2"), "answer-1")]:
        got = cc.evaluate(c, col, codes, arr["correct"], arr["cost_usd"], arr["latency_s"])
        played = [cc.play(c, r) for r in rows]
        assert np.allclose(got["correct"], [p.outcome.correct for p in played])
        assert np.allclose(got["cost"], [p.outcome.cost_usd for p in played])
        assert np.allclose(got["latency"], [p.outcome.latency_s for p in played])
        assert list(got["escalated"]) == [p.escalated for p in played]


@pytest.fixture(scope="module")
def sim():
    cfg = load_config(["zoo.sandbox.allow_unconfined=true"])
    tools = LocalToolClient(build_tools(cfg.zoo, ["consult", "answer", "submit"]))
    # a shared distractor set, so that two wrong experts can agree
    tasks = [Task(id=f"q{i}", problem=f"Pick the letter for item {i}.", answer="B",
                  meta={"family": ["lookup", "arith", "code"][i % 3], "difficulty": 1 + i % 3,
                        "distractors": ["A", "C"]}) for i in range(24)]
    score = episode_scorer({"default": "exact"})  # the orchestrator's own tokens unpriced: $ are the experts'
    ev = Evaluator(TOK, Prompter(TOK), {0: tools}, TOK.eos_token_id, score=score,
                   agent_kwargs={"max_turns": 4, "eos_token_ids": [TOK.eos_token_id]})
    return ev, tasks


def test_offline_cascade_outcomes_equal_the_episodes_the_agent_loop_plays(sim):
    ev, tasks = sim
    ev.scripts = {t: [f'<tool_call>{{"name": "answer", "arguments": {{"model": "{t}"}}}}</tool_call>'] for t in TIERS}
    one_shot = [Outcome.from_record(r) for r in asyncio.run(ev.run(tasks, TIERS, {"own": None}, [0]))]
    assert all(o.answer in ("A", "B", "C") for o in one_shot)
    cascades = [cc.Cascade("pair", ("answer-4", "answer-3"), "answer-1"), cc.Cascade("no_answer", ("answer-4",), "answer-1"),
                cc.Cascade("three", ("answer-4", "answer-3", "answer-2"), "answer-1")]
    offline = {(o.task_id, o.plan): o for o in cc.cascade_outcomes(one_shot, cascades)}
    ev.scripts = {c.name: cc.choose(c) for c in cascades}
    played = asyncio.run(ev.run(tasks, list(ev.scripts), {"own": None}, [0]))
    assert len(played) == len(offline) == 3 * len(tasks)
    escalations = 0
    for r in played:
        o = offline[(r["task_id"], r["policy"])]
        assert (r["correct"], r["answer"], r["termination"]) == (o.correct, o.answer, "answered"), r
        assert r["cost_usd"] == pytest.approx(o.cost_usd) and r["latency_s"] == pytest.approx(o.latency_s)
        escalations += "answer-1" in r["tool_counts"]
    assert 0 < escalations < len(played)  # both branches were taken


def test_frontier_cascades_keep_only_those_no_single_tier_beats():
    # answer-1: right on all, dear; answer-2/3: cheap, right on the same 70 % and agreeing exactly there
    outs = []
    for i in range(100):
        right = i < 70
        outs += [Outcome(f"t{i}", "answer-1", True, 1.0, 1.0, 0, "B"),
                 Outcome(f"t{i}", "answer-2", right, 0.1, 1.0, 0, "B" if right else "A"),
                 Outcome(f"t{i}", "answer-3", right, 0.2, 1.0, 0, "B" if right else "C")]
    front = cc.frontier_cascades(outs, k=8)
    assert cc.parse("answer-2&answer-3>answer-1") in front  # 100 % at 0.3 + 0.3 x 1.0: below answer-1's $
    assert all(c.final == "answer-1" or c.kind == "no_answer" for c in front)
    assert cc.frontier_cascades(outs, k=0) == []


def test_a_cascade_hint_names_its_rule_and_its_calls_follow_the_answers():
    from orchestra.agent.hints import HINT_KEY, hint_text
    from orchestra.routing.plans import Plan

    c = cc.Cascade("pair", ("answer-4", "answer-3"), "answer-1")
    plans = [Plan("answer-1", (("answer", "answer-1"),)), cc.as_plan(c)]
    task = Task(id="h", problem="p", answer="B", pref={"accuracy": 1.0})
    task.meta[HINT_KEY] = {"plans": [p.name for p in plans], "calls": [[list(x) for x in p.calls] for p in plans],
                           "p_correct": [0.7, 0.9], "cost_usd": [0.01, 0.005], "latency_s": [1.0, 2.0],
                           "cost_scale": 0.01, "latency_scale": 10.0}
    assert hint_text(task) == ("Router (odds high): consult answer-4, then consult answer-3; if they differ, "
                               "answer answer-1.")
    assert callable(cc.script_of(plans[1])) and cc.script_of(plans[0]) == plans[0].texts()

    def consult(tier: str, answer: str) -> ToolRecord:
        return ToolRecord(0, "consult", tier, {"model": tier}, ToolResult(f"{tier} answered: {answer}",
                                                                             candidate=answer))

    same, differ = [consult("answer-4", "B"), consult("answer-3", "(b)")], [consult("answer-4", "B"),
                                                                             consult("answer-3", "C")]
    assert cc.expected_calls(c.name, same) == [["consult", "answer-4"], ["consult", "answer-3"], ["submit", "answer-4"]]
    assert cc.expected_calls(c.name, differ)[-1] == ["answer", "answer-1"]
