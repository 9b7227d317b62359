"""Route hints (orchestra/routing/hints.py attaches them, orchestra/agent/hints.py renders the line): the estimator
router's estimates carried by a task and the prompt line they give under the task's own preference, the same choice
the router itself makes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from orchestra.agent.hints import HINT_KEY, hint_text, suggestion
from orchestra.agent.prompt import Prompter
from orchestra.preferences import PRESETS
from orchestra.routing.estimator import Expected, expected_reward
from orchestra.routing.hints import attach
from orchestra.routing.plans import Plan
from orchestra.types import Task
from tests.helpers.fakes import ByteTokenizer

PLANS = [Plan("answer-1", (("answer", "answer-1"),)), Plan("answer-2", (("answer", "answer-2"),)),
         Plan("reasoner-1+answer-2", (("enhance_reasoning", "reasoner-1"), ("answer", "answer-2")))]


def _tasks() -> tuple[list[Task], Expected]:
    tasks = [Task(id=f"t{i}", problem=f"question {i}", answer="") for i in range(2)]
    # t0: the weak tier is nearly as good; t1: only the strong tier (or the reasoner first) gets it right
    exp = Expected(p_correct=np.array([[0.92, 0.88, 0.9], [0.9, 0.2, 0.7]]),
                   cost_usd=np.array([[0.02, 0.0002, 0.003], [0.02, 0.0002, 0.003]]),
                   latency_s=np.array([[3.0, 1.0, 4.0], [3.0, 1.0, 4.0]]))
    attach(tasks, exp, PLANS, cost_scale=0.01, latency_scale=10.0)
    return tasks, exp


def test_the_hint_is_the_routers_choice_under_each_tasks_own_preference():
    tasks, exp = _tasks()
    for name in ("accuracy-first", "balanced", "cost-first"):
        for i, task in enumerate(tasks):
            under = dataclasses.replace(task, pref=dict(PRESETS[name]))
            ev = expected_reward(Expected(exp.p_correct[i:i + 1], exp.cost_usd[i:i + 1], exp.latency_s[i:i + 1]),
                                 PLANS, under.pref, 0.01, 10.0)[0]
            best, calls, p = suggestion(under)
            assert best == PLANS[int(np.argmax(ev))].name and p == pytest.approx(exp.p_correct[i, int(np.argmax(ev))])
            assert [tuple(c) for c in calls] == list(PLANS[int(np.argmax(ev))].calls)
    # per question: under balanced the easy question goes to the cheap tier, the hard one does not
    balanced = [suggestion(dataclasses.replace(t, pref=dict(PRESETS["balanced"])))[0] for t in tasks]
    assert balanced[0] == "answer-2" and balanced[1] != "answer-2"
    text = hint_text(dataclasses.replace(tasks[1], pref=dict(PRESETS["accuracy-first"])))
    assert text == "Router (odds high): answer answer-1."
    assert hint_text(Task(id="x", problem="no estimates", answer="")) == ""


def test_the_prompt_shows_the_hint_only_when_asked_and_it_survives_serialisation():
    tasks, _ = _tasks()
    task = Task.from_dict(dataclasses.replace(tasks[1], pref=dict(PRESETS["balanced"])).to_dict())  # as sent to a worker
    assert HINT_KEY in task.meta
    tok = ByteTokenizer()
    shown = Prompter(tok, route_hints=True).first_messages(task)[1]["content"]
    assert shown.endswith(hint_text(task)) and hint_text(task).startswith("Router (")
    assert "Router:" not in Prompter(tok).first_messages(task)[1]["content"]
    again = Prompter(tok, route_hints=True).reprompt_user(task, ["a document"], [], [])["content"]
    assert hint_text(task) in again
    with pytest.raises(ValueError, match="3 estimate rows for 2"):
        attach(tasks, Expected(np.zeros((3, 3)), np.zeros((3, 3)), np.zeros((3, 3))), PLANS, 0.01, 10.0)


def test_route_hints_need_the_expected_value_teacher():
    from orchestra.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="agent.route_hints"):
        load_config(["agent.route_hints=true", "sft.teacher=random", "sft.restate_preference=false"])
    assert load_config(["experiment=cpu_tiny", "agent.route_hints=true"]).agent.route_hints


def test_one_call_hints_have_one_length_in_the_tiny_tokenizer():
    """The tiny policy reads by position: every band's word is one token, so the tier id and the preference words
    above the hint keep their distance from the policy's tool call whatever the odds."""
    from orchestra.agent.hints import CONFIDENCE
    from orchestra.config import load_config
    from orchestra.policy.models import load_tokenizer

    m = load_config(["experiment=cpu_tiny"]).model
    tok = load_tokenizer(m.name, tiny=m.tiny, cache_dir=m.cache_dir, chat_template=m.chat_template)
    lengths = set()
    for p in [bound + 0.01 for bound, _word in CONFIDENCE]:
        task = Task(id="t", problem="q", answer="", pref=dict(PRESETS["accuracy-first"]))
        attach([task], Expected(np.array([[p]]), np.array([[0.01]]), np.array([[1.0]])), PLANS[:1], 0.01, 10.0)
        lengths.add(len(tok.encode(hint_text(task), add_special_tokens=False)))
    assert len(lengths) == 1
