"""What any router that sees only a task's family could reach, computed from recorded outcomes (replay zoos).

A family-level router sends every task of a family to one answer tier (or mixes two, which is what the
linear pieces of the frontier mean). From each tier's recorded correctness and $ per task, the best such
routers form a concave frontier of (mean $, accuracy) points: per family, the upper hull of its tiers'
(Σ$, Σcorrect) points; then, from the cheapest point of every family, the hull segments taken in order of
falling accuracy-per-$ (the Minkowski sum of the family hulls). The families are assigned after looking at
the answers, so this is an in-sample upper bound for subject-aware routing, not a deployable router; the
gap between it and the oracle router is what only per-question knowledge can buy.

Where outcomes are not recorded (simulated zoos, multi-step routes), orchestra/routing/plans.py `plan_scripts`
lists every fixed plan (`answer` with each tier, alone or after one call of another tool with each of its tiers);
running each plan on the tasks (orchestra.eval.runner.Evaluator's `scripts`) and passing the episodes to
`outcomes_of_episodes` gives the same frontier over family -> plan routers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

Point = tuple[float, float]  # (total $, total correct) over a family's tasks


def _upper_hull(points: list[Point]) -> list[Point]:
    """Vertices of the upper-left concave hull, from the cheapest (most correct among equals) rightwards;
    points that cost more without more correct answers are dropped."""
    pts = sorted(set(points), key=lambda p: (p[0], -p[1]))
    hull: list[Point] = []
    for p in pts:
        if hull and p[1] <= hull[-1][1]:
            continue  # costs at least as much, no more correct
        while len(hull) >= 2:
            (x0, y0), (x1, y1) = hull[-2], hull[-1]
            if (y1 - y0) * (p[0] - x0) <= (p[1] - y0) * (x1 - x0):  # hull[-1] is under the chord
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def family_frontier(outcomes: dict[str, dict[str, Point]], n_tasks: int) -> list[tuple[float, float]]:
    """Frontier of family-level routers as (mean $ per task, accuracy) vertices, cheapest first.
    `outcomes[family][tier]` = (Σ$, Σcorrect) of that tier over the family's tasks."""
    if n_tasks <= 0:
        raise ValueError("n_tasks must be > 0")
    hulls = [_upper_hull(list(tiers.values())) for tiers in outcomes.values() if tiers]
    cost = sum(h[0][0] for h in hulls)
    correct = sum(h[0][1] for h in hulls)
    steps = [(b[0] - a[0], b[1] - a[1]) for h in hulls for a, b in zip(h, h[1:], strict=False)]
    # Equal-cost steps (dc == 0) cannot occur: the hull keeps one point per cost.
    steps.sort(key=lambda s: -s[1] / s[0])
    front = [(cost / n_tasks, correct / n_tasks)]
    for dc, dk in steps:
        cost, correct = cost + dc, correct + dk
        front.append((cost / n_tasks, correct / n_tasks))
    return front


def best_accuracy_at(front: list[tuple[float, float]], budget: float) -> float:
    """Highest accuracy on the frontier at mean $ <= budget (linear between vertices: a mix of two routers).
    Below the cheapest vertex nothing is reachable but answering fewer tasks: scaled toward (0, 0)."""
    if budget < front[0][0]:
        return front[0][1] * budget / front[0][0] if front[0][0] > 0 else front[0][1]
    for (c0, a0), (c1, a1) in zip(front, front[1:], strict=False):
        if c0 <= budget <= c1:
            return a0 + (a1 - a0) * (budget - c0) / (c1 - c0)
    return front[-1][1]


def cheapest_reaching(front: list[tuple[float, float]], accuracy: float) -> float:
    """Lowest mean $ on the frontier with at least `accuracy` (inf when no family router gets there)."""
    if accuracy <= front[0][1]:
        return front[0][0] * max(accuracy, 0.0) / front[0][1] if front[0][1] > 0 else 0.0
    for (c0, a0), (c1, a1) in zip(front, front[1:], strict=False):
        if a0 <= accuracy <= a1:
            return c0 + (c1 - c0) * (accuracy - a0) / (a1 - a0)
    return float("inf")


def outcomes_of_episodes(records: Iterable[dict[str, Any]]) -> tuple[dict, int]:
    """(outcomes[family][policy] = (Σ$, Σcorrect), episodes per policy) from evaluator records."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    per_policy: dict[str, int] = defaultdict(int)
    for r in records:
        acc = out[str(r.get("family") or "all")][r["policy"]]
        acc[0] += float(r["cost_usd"])
        acc[1] += float(r["correct"])
        per_policy[r["policy"]] += 1
    counts = set(per_policy.values())
    if len(counts) > 1:
        raise ValueError(f"policies ran different numbers of episodes: {dict(per_policy)}")
    return {f: {p: (v[0], v[1]) for p, v in pol.items()} for f, pol in out.items()}, counts.pop() if counts else 0


def recorded_outcomes(tasks: Iterable[Any], tiers: dict[str, str], experts: dict[str, Any]) -> tuple[dict, int]:
    """(outcomes[family][tier] = (Σ$, Σcorrect), number of tasks) from replay experts' records; tasks some
    tier has no record for are skipped (the evaluation would score them as errors). The family is
    task.meta["family"] (MMLU-Pro: the subject)."""
    records = {tier: (experts[name], experts[name].records()) for tier, name in tiers.items()}
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    n = 0
    for task in tasks:
        qid = str(task.meta.get("question_id", task.id))
        recs = {tier: (e, r.get(qid)) for tier, (e, r) in records.items()}
        if any(rec is None for _, rec in recs.values()):
            continue
        n += 1
        fam = str(task.meta.get("family") or "all")
        for tier, (expert, rec) in recs.items():
            acc = out[fam][tier]
            acc[0] += expert.priced(rec)[2]
            acc[1] += float(rec.correct)
    return {f: {t: (v[0], v[1]) for t, v in tiers_.items()} for f, tiers_ in out.items()}, n
