"""The estimator router and the expected-value teacher on a toy zoo whose probabilities are known.

Two task kinds ("easy", "hard") with a one-hot "embedding"; two plans: `cheap` (right 0.9 on easy, 0.3 on
hard, $0.0001) and `strong` (right 0.95 on both, $0.02). Under accuracy-first the strong plan pays on hard
tasks only; under cost-first the cheap plan wins everywhere. Outcomes are drawn from those probabilities.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from orchestra.preferences import preset
from orchestra.routing.estimator import Expected, RouteEstimator, TaskFeatures, expected_reward
from orchestra.routing.plans import Outcome, Plan, enumerate_plans
from orchestra.routing.teacher import cross_fitted, label_vectors, teacher_labels
from orchestra.types import Task
from reward.rubric import scalar_reward

CHEAP = Plan("answer-2", (("answer", "answer-2"),))
STRONG = Plan("answer-1", (("answer", "answer-1"),))
P_RIGHT = {("easy", "answer-2"): 0.9, ("hard", "answer-2"): 0.3, ("easy", "answer-1"): 0.95,
           ("hard", "answer-1"): 0.95}
COST = {"answer-2": 0.0001, "answer-1": 0.02}


def embed(texts: list[str]) -> np.ndarray:
    return np.array([[t.startswith("easy"), t.startswith("hard")] for t in texts], dtype=float)


def toy(n: int = 200, seed: int = 0) -> tuple[list[Task], list[Outcome]]:
    rng = random.Random(seed)
    tasks, outcomes = [], []
    for i in range(n):
        kind = "easy" if i % 2 == 0 else "hard"
        t = Task(id=f"t{i}", category="qa", problem=f"{kind} question {i}", answer="x", data_source="toy",
                 model_mapping={"answer-1": "big", "answer-2": "small"}, meta={"family": kind})
        tasks.append(t)
        for plan in ("answer-1", "answer-2"):
            outcomes.append(Outcome(t.id, plan, rng.random() < P_RIGHT[(kind, plan)], COST[plan], 1.0))
    return tasks, outcomes


def fitted() -> tuple[RouteEstimator, TaskFeatures, list[Task]]:
    tasks, outcomes = toy()
    feats = TaskFeatures(embed)
    est = RouteEstimator([STRONG, CHEAP], C=10.0).fit(feats(tasks), [t.id for t in tasks], outcomes)
    return est, feats, tasks


def test_fit_recovers_the_known_probabilities():
    est, feats, tasks = fitted()
    exp = est.expected(feats(tasks[:2]))  # an easy task, then a hard one
    assert exp.p_correct[0, 1] == pytest.approx(0.9, abs=0.08)  # cheap, easy
    assert exp.p_correct[1, 1] == pytest.approx(0.3, abs=0.1)  # cheap, hard
    assert exp.p_correct[:, 0] == pytest.approx([0.95, 0.95], abs=0.06)
    assert exp.cost_usd[:, 0] == pytest.approx([0.02, 0.02], rel=0.05)


def test_choice_follows_the_preference():
    est, feats, tasks = fitted()
    X = feats(tasks[:2])
    acc_first = est.choose(X, [preset("accuracy-first")] * 2, cost_scale=0.01, latency_scale=10.0)
    cost_first = est.choose(X, [preset("cost-first")] * 2, cost_scale=0.01, latency_scale=10.0)
    assert [p.name for p in acc_first] == ["answer-2", "answer-1"]  # strong only where cheap fails
    assert [p.name for p in cost_first] == ["answer-2", "answer-2"]


def test_tool_weights_count_in_the_choice():
    est, feats, tasks = fitted()
    dislike = {**preset("accuracy-first"), "tool:answer-1": -1.0}
    assert est.choose(feats(tasks[1:2]), [dislike], 0.01, 10.0)[0].name == "answer-2"


def test_save_and_load_give_the_same_predictions(tmp_path):
    est, feats, tasks = fitted()
    est.save(tmp_path, extra={"features": {"meta_keys": []}})
    again, meta = RouteEstimator.load(tmp_path)
    X = feats(tasks[:4])
    np.testing.assert_allclose(again.expected(X).p_correct, est.expected(X).p_correct)
    assert [p.name for p in again.plans] == ["answer-1", "answer-2"] and meta["features"] == {"meta_keys": []}
    assert not list(tmp_path.glob("*.tmp"))


def test_teacher_labels_differ_by_preference_where_expected_values_say_so():
    tasks, outcomes = toy()
    feats = TaskFeatures(embed)
    exp = cross_fitted(feats(tasks), [t.id for t in tasks], outcomes, [STRONG, CHEAP], folds=4, C=10.0)
    # cost weight 0.15: strong costs 0.3 of reward, worth it on hard tasks (+0.7 accuracy), not on easy ones (+0.05);
    # accuracy-first's 0.05 leaves easy tasks within the estimates' noise (+0.05 accuracy vs 0.1 of reward)
    labels = teacher_labels(tasks[:2], exp, [STRONG, CHEAP], sampled=0, seed=0, cost_scale=0.01, latency_scale=10.0,
                            fixed=["accuracy-first", "cost-first", "accuracy=1,cost=0.15"])
    got = {(lab.task.meta["family"], lab.task.pref["cost"]): lab.plan.name for lab in labels}
    assert got[("hard", 0.05)] == "answer-1" and got[("hard", 2.0)] == "answer-2"
    assert got[("easy", 0.15)] == "answer-2" and got[("hard", 0.15)] == "answer-1"
    assert all(lab.margin >= 0 for lab in labels)


def test_cross_fitting_does_not_label_a_task_from_its_own_outcome():
    """A task with a feature no other task has, and a freak outcome: fitted in-sample, the estimator would
    follow that outcome; cross-fitted, it predicts what the other tasks say."""
    tasks, outcomes = toy(120)
    odd = Task(id="odd", category="qa", problem="odd one", answer="x", data_source="toy",
               model_mapping={"answer-1": "big", "answer-2": "small"})
    outcomes += [Outcome("odd", "answer-1", False, 0.02, 1.0), Outcome("odd", "answer-2", True, 0.0001, 1.0)]
    tasks.append(odd)

    def embed3(texts):
        return np.hstack([embed(texts), np.array([[t.startswith("odd")] for t in texts], dtype=float)])

    X, ids = TaskFeatures(embed3)(tasks), [t.id for t in tasks]
    inside = RouteEstimator([STRONG, CHEAP], C=100.0, select=False).fit(X, ids, outcomes).expected(X[-1:])
    crossed = cross_fitted(X, ids, outcomes, [STRONG, CHEAP], folds=5, C=100.0)
    assert inside.p_correct[0, 1] > 0.8  # in-sample: the odd task's own lucky outcome
    assert crossed.p_correct[-1, 1] < inside.p_correct[0, 1] - 0.2


def test_label_vectors_are_presets_then_seeded_draws():
    t = toy(2)[0][0]
    a, b = label_vectors(t, sampled=3, seed=1), label_vectors(t, sampled=3, seed=1)
    assert a == b and len(a) == 6 and a[0] == preset("accuracy-first") and a[2] == preset("cost-first")
    assert label_vectors(t, sampled=0, seed=1, fixed=["accuracy=1,cost=0.2"]) == [{"accuracy": 1.0, "cost": 0.2}]


def test_enumerate_plans_covers_one_and_two_call_routes():
    schemas = [{"function": {"name": n, "parameters": {"properties": {"model": {"enum": tiers}}}}}
               for n, tiers in (("answer", ["answer-1", "answer-2"]), ("search", ["search-1"]))]
    names = [p.name for p in enumerate_plans(schemas)]
    assert names == ["answer-1", "search-1+answer-1", "answer-2", "search-1+answer-2"]
    assert enumerate_plans(schemas)[1].tool_counts() == {"search-1": 1, "answer-1": 1}


def test_fit_refuses_a_plan_without_outcomes():
    tasks, outcomes = toy(10)
    with pytest.raises(ValueError, match="no outcomes for plan"):
        RouteEstimator([STRONG, CHEAP, Plan("answer-3", (("answer", "answer-3"),))]).fit(
            TaskFeatures(embed)(tasks), [t.id for t in tasks], outcomes)


def test_expected_reward_is_the_scalar_rubric_in_expectation():
    """The estimator's vectorised formula equals p·R(right) + (1−p)·R(wrong) of reward/rubric.scalar_reward."""
    plans = [CHEAP, Plan("reasoner-1+answer-1", (("enhance_reasoning", "reasoner-1"), ("answer", "answer-1")))]
    exp = Expected(np.array([[0.3, 0.8]]), np.array([[0.0001, 0.02]]), np.array([[1.5, 9.0]]))
    pref = {"accuracy": 1.0, "cost": 0.5, "latency": 0.2, "tool:enhance_reasoning": -0.1}
    got = expected_reward(exp, plans, pref, cost_scale=0.01, latency_scale=10.0)[0]
    for j, plan in enumerate(plans):
        def r(correct, j=j, plan=plan):
            return scalar_reward(correct, exp.cost_usd[0, j], exp.latency_s[0, j], plan.tool_counts(), pref).value
        p = exp.p_correct[0, j]
        assert got[j] == pytest.approx(p * r(True) + (1 - p) * r(False))
