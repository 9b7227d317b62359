"""Escalation rates (orchestra/eval/escalation.py) over real agent-loop episodes on the simulated zoo: the next call
after two consults counts as an escalation unless it submits, split by whether the two answers agreed."""

from __future__ import annotations

import asyncio

import pytest

from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.config import load_config
from orchestra.engine import Sampling
from orchestra.eval.escalation import escalation
from orchestra.routing.cascade import Cascade, agree, choose
from orchestra.types import Task
from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
from tools.base import LocalToolClient
from tools.registry import build_tools

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def tools():
    return LocalToolClient(build_tools(load_config([]).zoo, ["consult", "answer", "submit"]))


def play(tools, script, i: int):
    task = Task(id=f"e{i}", problem=f"Item {i}: which letter?", answer="B",
                meta={"family": "lookup", "difficulty": 3, "distractors": ["A", "C"]})
    loop = AgentLoop(ScriptedEngine(TOK, script), tools, Prompter(TOK), max_turns=4, eos_token_ids=[TOK.eos_token_id])
    return asyncio.run(loop.run(task, Sampling(max_tokens=200), uid="u"))


def test_a_reading_cascade_escalates_exactly_on_disagreement(tools):
    rule = choose(Cascade("pair", ("answer-4", "answer-3"), "answer-1"))
    trajs = [play(tools, lambda prompt, r=rule: r(0, prompt), i) for i in range(40)]
    agreed = [agree(t.tool_records[0].result.candidate, t.tool_records[1].result.candidate) for t in trajs]
    assert 0 < sum(agreed) < len(agreed)  # both cases occur
    got = escalation(trajs)
    assert (got["escalation_disagree"], got["escalation_agree"]) == (1.0, 0.0)
    assert (got["pairs_agree"], got["pairs_disagree"]) == (sum(agreed), len(agreed) - sum(agreed))


def test_a_policy_that_ignores_the_answers_escalates_at_one_rate(tools):
    consults = [call_text("consult", model="answer-4"), call_text("consult", model="answer-3")]
    always = [play(tools, [*consults, call_text("answer", model="answer-1")], i) for i in range(20)]
    never = [play(tools, [*consults, call_text("submit", model="answer-4")], i) for i in range(20)]
    assert escalation(always)["escalation_agree"] == escalation(always)["escalation_disagree"] == 1.0
    assert escalation(never)["escalation_agree"] == escalation(never)["escalation_disagree"] == 0.0
    assert escalation(always)["reask_agree"] == escalation(always)["reask_disagree"] == 0.0  # gpt-5: a new tier
    assert escalation([play(tools, [call_text("answer", model="answer-1")], 0)]) == {}  # no consults: no figure


def test_asking_a_consulted_tier_again_counts_as_an_escalation_and_as_a_reask(tools):
    """The move RL found under balanced (docs/quality.md, RL's positive control): on disagreement a fresh answer from a cheap tier
    already consulted, not a stronger one. Both are escalations; only the first is a re-ask."""
    consults = [call_text("consult", model="answer-4"), call_text("consult", model="answer-3")]
    again = [play(tools, [*consults, call_text("answer", model="answer-4")], i) for i in range(20)]
    got = escalation(again)
    assert got["escalation_agree"] == got["escalation_disagree"] == 1.0
    assert got["reask_agree"] == got["reask_disagree"] == 1.0
    mixed = escalation(again[:10] + [play(tools, [*consults, call_text("answer", model="answer-1")], i)
                                     for i in range(10, 20)])
    share = {k: sum(1 for t in again[:10] if _agreed(t) == k) for k in (True, False)}
    for k, key in ((True, "agree"), (False, "disagree")):
        if mixed[f"pairs_{key}"]:
            assert mixed[f"reask_{key}"] == share[k] / mixed[f"pairs_{key}"]
            assert mixed[f"escalation_{key}"] == 1.0


def _agreed(traj) -> bool:
    return agree(traj.tool_records[0].result.candidate, traj.tool_records[1].result.candidate)
