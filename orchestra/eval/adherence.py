"""Does a policy follow its user? Figures over a sweep of the cost weight, from evaluation records.

The sweep holds accuracy at 1 and latency at 0 and sets the cost weight to each of `SWEEP` (one point per half
decade, 0.03 to 3; defined in orchestra/preferences.py beside the presets). None of its vectors is a training
vector: the config check refuses fixed training vectors on it, the teacher redraws sampled ones that land on it,
and `check_unseen` says so for a run's full list before any figure is taken. A policy that follows its preference
spends less as the weight rises:
- `adherence`: Spearman's rank correlation between the cost weight and the mean $ per episode, negated, so 1.0
  means $ falls strictly along the sweep and 0 that the weight makes no difference (scipy.stats.spearmanr);
- `match_strongest_cost_ratio`: among the sweep points at least as accurate as always-strongest, the lowest
  mean $ ÷ always-strongest's (inf when no point is that accurate): what matching the frontier model costs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import mean
from typing import Any

from orchestra.preferences import SWEEP_COSTS as SWEEP
from orchestra.preferences import SWEEP_PREFIX as PREFIX
from orchestra.preferences import check_disjoint
from orchestra.preferences import sweep_vectors as sweep_preferences

__all__ = ["PREFIX", "SWEEP", "adherence", "check_unseen", "match_strongest_cost_ratio", "sweep_points",
           "sweep_preferences", "task_costs"]


def check_unseen(training: Iterable[dict[str, float]], weights: Sequence[float] = SWEEP) -> None:
    """Raise ValueError when a vector of the sweep is among a run's training vectors (a figure over the sweep
    must measure vectors the policy was never trained on)."""
    check_disjoint(sweep_preferences(weights).values(), training)


def sweep_points(records: list[dict[str, Any]], policy: str) -> list[tuple[float, float, float]]:
    """(cost weight, mean $, accuracy) per sweep point the policy ran, by rising weight."""
    by_w: dict[float, list[dict[str, Any]]] = {}
    for r in records:
        if r["policy"] == policy and str(r["preference"]).startswith(PREFIX):
            by_w.setdefault(float(r["preference"][len(PREFIX):]), []).append(r)
    return [(w, mean(float(r["cost_usd"]) for r in rs), mean(float(r["correct"]) for r in rs))
            for w, rs in sorted(by_w.items())]


def task_costs(records: list[dict[str, Any]], policy: str) -> dict[str, dict[str, float]]:
    """preference -> task id -> mean $ (a task's seeds averaged) of one policy's records: what the verdict's
    per-step rule pairs across preferences (orchestra/eval/verdict.py)."""
    costs: dict[str, dict[str, list[float]]] = {}
    for r in records:
        if r["policy"] == policy:
            costs.setdefault(str(r["preference"]), {}).setdefault(str(r["task_id"]), []).append(float(r["cost_usd"]))
    return {p: {t: mean(v) for t, v in by.items()} for p, by in costs.items()}


def adherence(points: list[tuple[float, float, float]]) -> float:
    """−Spearman(cost weight, mean $); nan with fewer than three points or when $ never changes."""
    from scipy.stats import spearmanr

    if len(points) < 3 or len({round(c, 12) for _, c, _ in points}) < 2:
        return float("nan")
    rho = spearmanr([w for w, _, _ in points], [c for _, c, _ in points]).statistic
    return -float(rho)


def match_strongest_cost_ratio(points: list[tuple[float, float, float]], strongest_usd: float,
                               strongest_accuracy: float) -> float:
    """The lowest $ ÷ strongest's $ among sweep points at least as accurate as always-strongest (inf: none)."""
    if strongest_usd <= 0:
        return math.inf
    ok = [c for _, c, acc in points if acc >= strongest_accuracy]
    return min(ok) / strongest_usd if ok else math.inf
