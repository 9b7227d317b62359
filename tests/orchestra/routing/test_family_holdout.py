"""The per-family fixed router (orchestra/routing/family.py) and the comparison of routers on recorded outcomes
(orchestra/routing/holdout.py) on synthetic logs whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest

from orchestra.preferences import preset
from orchestra.routing.estimator import TaskFeatures
from orchestra.routing.family import FamilyRouter
from orchestra.routing.holdout import Recorded, compare, reward
from orchestra.routing.plans import Outcome, Plan
from orchestra.types import Task

STRONG = Plan("answer-1", (("answer", "answer-1"),))
CHEAP = Plan("answer-2", (("answer", "answer-2"),))


def task(i: int, family: str) -> Task:
    return Task(id=f"t{i}", category="qa", problem=f"{family} {i}", answer="x", data_source="toy",
                meta={"family": family})


def test_family_router_picks_the_best_mean_reward_per_family_and_preference():
    tasks = [task(i, "math" if i < 10 else "trivia") for i in range(20)]
    outs = []
    for t in tasks:  # cheap is right on trivia, wrong on math; strong is right everywhere at 200x the $
        outs.append(Outcome(t.id, "answer-1", True, 0.02, 5.0))
        outs.append(Outcome(t.id, "answer-2", t.meta["family"] == "trivia", 0.0001, 1.0))
    fam = FamilyRouter([STRONG, CHEAP]).fit(tasks, outs)
    acc = fam.table(preset("accuracy-first"), 0.01, 10.0)
    assert acc == {"*": "answer-1", "math": "answer-1", "trivia": "answer-2"}
    assert set(fam.table(preset("cost-first"), 0.01, 10.0).values()) == {"answer-2"}
    unseen = task(99, "law")  # unseen family: the means over every training task
    got = fam.choose([tasks[0], tasks[15], unseen], [preset("accuracy-first")] * 3, 0.01, 10.0)
    assert [p.name for p in got] == ["answer-1", "answer-2", "answer-1"]
    exp = fam.expected([tasks[0], unseen])
    assert exp.p_correct[0].tolist() == [1.0, 0.0] and exp.p_correct[1].tolist() == [1.0, 0.5]
    with pytest.raises(ValueError, match="no outcomes"):
        FamilyRouter([STRONG, CHEAP, Plan("answer-3", (("answer", "answer-3"),))]).fit(tasks, outs)


def synthetic(n_models: int, n: int = 160, seed: int = 0) -> Recorded:
    """A log where the question's embedding (not its family) says which model gets it right: the estimator has
    something to learn that the per-family router cannot see."""
    rng = np.random.default_rng(seed)
    tasks = [task(i, f"f{i % 3}") for i in range(n)]
    emb = rng.normal(size=(n, 4))
    ok = np.zeros((n, n_models))
    ok[:, 0] = rng.random(n) < 0.8  # the priciest model: usually right
    for j in range(1, n_models):
        ok[:, j] = rng.random(n) < np.where(emb[:, 0] > 0, 0.9, 0.1)  # cheap ones: right on one half of the space
    usd = np.tile([0.01 / (4 ** j) for j in range(n_models)], (n, 1))
    feats = TaskFeatures(lambda texts: emb[[int(t.split()[1]) for t in texts]], ["family"]).fit_vocab(tasks)
    plans = [Plan(f"answer-{j + 1}", (("answer", f"answer-{j + 1}"),)) for j in range(n_models)]
    return Recorded(tasks, plans, ok, usd, np.ones((n, n_models)), feats(tasks), feats.n_meta)


@pytest.mark.parametrize("n_models", [2, 3])
def test_compare_reports_the_estimator_beside_the_family_router(n_models):
    rec = synthetic(n_models)
    train, test = list(range(120)), list(range(120, 160))
    figures, lines = compare(rec, train, test, cost_scale=0.01, latency_scale=10.0, label="toy")
    assert figures["logloss_estimator"] < figures["logloss_family"]  # the embedding carries what families do not
    assert figures["balanced_reward_gain_vs_family_estimator"] > 0
    key = "yardstick_apgr_estimator" if n_models == 2 else "yardstick_usd_apgr_estimator"
    assert figures[key] > 0.5  # better than random routing on held-out questions
    assert figures["max_gap_family_over_estimator_points"] <= 1.0
    assert any("paired bootstrap 95 %" in line for line in lines) and "chose" in lines[0]


def test_reward_is_the_scalar_rubric_of_one_call():
    got = reward({"accuracy": 1.0, "cost": 0.5, "latency": 0.2}, np.array([1.0, 0.0]), np.array([0.01, 0.02]),
                 np.array([2.0, 4.0]), cost_scale=0.01, latency_scale=10.0)
    assert got.tolist() == pytest.approx([1.0 - 0.5 - 0.04, -1.0 - 0.08])


def test_curve_intervals_are_zero_for_one_router_and_signed_when_one_dominates():
    """Three models (priciest most accurate). A router against itself: both intervals are exactly 0. A router that
    sends the questions the cheapest model gets wrong to the strongest, against one that sends a fixed share: its
    APGR is higher on every resample, and the other never leads it (they meet at the shared ends)."""
    from orchestra.routing.holdout import curve_intervals

    rng = np.random.default_rng(0)
    n = 300
    ok = np.column_stack([np.ones(n), rng.random(n) < 0.7, rng.random(n) < 0.5]).astype(float)
    usd = np.tile([1.0, 0.3, 0.1], (n, 1))
    half = np.array([np.where(np.arange(n) < n * f, 0, 2) for f in (0.0, 0.25, 0.5, 1.0)])  # [weights, questions]
    upgrade = np.where(ok[:, 2] == 1, 2, 0)  # the questions the cheapest model misses go to the strongest
    smart = np.array([np.full(n, 2), upgrade, upgrade, np.zeros(n, int)])  # same two ends as `half`
    same = curve_intervals(ok, usd, half, half, n=200)
    assert same == {"apgr_diff": (0.0, 0.0), "max_gap": (0.0, 0.0)}
    ci = curve_intervals(ok, usd, smart, half, n=200)
    assert ci["apgr_diff"][0] > 0 and ci["max_gap"][1] <= 0
