"""The preference-adherence figures (orchestra/eval/adherence.py) on hand-made evaluation records."""

from __future__ import annotations

import math

import pytest

from orchestra.eval.adherence import (
    SWEEP,
    adherence,
    match_strongest_cost_ratio,
    sweep_points,
    sweep_preferences,
)


def records(policy: str, usd_by_weight: dict[float, float], acc_by_weight: dict[float, float]) -> list[dict]:
    out = []
    for name, pref in sweep_preferences().items():
        w = pref["cost"]
        for k in range(4):  # four episodes a point: accuracy acc_by_weight[w] (in quarters)
            out.append({"policy": policy, "preference": name, "cost_usd": usd_by_weight[w],
                        "correct": k < round(4 * acc_by_weight[w])})
    return out


def test_sweep_vectors_hold_accuracy_and_latency():
    prefs = sweep_preferences()
    assert [p["cost"] for p in prefs.values()] == list(SWEEP)
    assert all(p["accuracy"] == 1.0 and p["latency"] == 0.0 for p in prefs.values())


def test_a_policy_that_follows_its_user_scores_one_and_one_that_ignores_it_nan_or_low():
    falls = records("orchestrator", dict(zip(SWEEP, (0.009, 0.004, 0.002, 0.001, 0.0005), strict=True)),
                    dict.fromkeys(SWEEP, 0.75))
    same = records("orchestrator", dict.fromkeys(SWEEP, 0.003), dict.fromkeys(SWEEP, 0.75))
    rises = records("orchestrator", dict(zip(SWEEP, (0.001, 0.002, 0.003, 0.004, 0.005), strict=True)),
                    dict.fromkeys(SWEEP, 0.75))
    assert adherence(sweep_points(falls, "orchestrator")) == pytest.approx(1.0)
    assert math.isnan(adherence(sweep_points(same, "orchestrator")))
    assert adherence(sweep_points(rises, "orchestrator")) == pytest.approx(-1.0)
    assert sweep_points(falls, "estimator") == []


def test_match_strongest_takes_the_cheapest_point_at_least_as_accurate():
    recs = records("orchestrator", dict(zip(SWEEP, (0.009, 0.004, 0.002, 0.001, 0.0005), strict=True)),
                   dict(zip(SWEEP, (1.0, 0.75, 0.75, 0.5, 0.25), strict=True)))
    points = sweep_points(recs, "orchestrator")
    assert match_strongest_cost_ratio(points, strongest_usd=0.01, strongest_accuracy=0.75) == pytest.approx(0.2)
    assert match_strongest_cost_ratio(points, strongest_usd=0.01, strongest_accuracy=1.0) == pytest.approx(0.9)
    assert math.isinf(match_strongest_cost_ratio(points, strongest_usd=0.01, strongest_accuracy=1.01))
