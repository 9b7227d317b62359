"""Evaluation statistics: per (policy, preference) means with 95% CIs, and the accuracy-vs-$ frontier.

`summarize` gives means with 95% CIs (normal approximation: 1.96 * sample std / sqrt(n); 0 when n < 2) from the
runner's episode records; `frontier` / `on_frontier` say where a policy sits against the fixed routers.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any


def mean_ci(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """(mean, half-width of the 95% normal-approximation interval); half-width 0 for fewer than 2 values."""
    n = len(values)
    if n == 0:
        return float("nan"), 0.0
    m = sum(values) / n
    if n < 2:
        return m, 0.0
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, z * math.sqrt(var / n)


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, preference): n, accuracy, cost (cents), latency (s), score, each with its CI;
    tool_mix = share of tool calls per tool id; answered = share of episodes that gave an answer."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["policy"], r["preference"]), []).append(r)
    rows = []
    for (policy, pref), rs in groups.items():
        row: dict[str, Any] = {"policy": policy, "preference": pref, "n": len(rs),
                               "seeds": sorted({r["seed"] for r in rs})}
        for key, values in (("accuracy", [float(r["correct"]) for r in rs]),
                            ("cost_cents", [100.0 * r["cost_usd"] for r in rs]),
                            ("latency_s", [r["latency_s"] for r in rs]), ("score", [r["reward"] for r in rs])):
            row[key], row[f"{key}_ci"] = mean_ci(values)
        calls = Counter()
        for r in rs:
            calls.update(r["tool_counts"])
        total = sum(calls.values())
        row["tool_mix"] = {k: v / total for k, v in sorted(calls.items())} if total else {}
        row["answered"] = sum(r["termination"] == "answered" for r in rs) / len(rs)
        rows.append(row)
    return rows


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Non-dominated (cost, accuracy) points sorted by cost: each is more accurate than every cheaper one."""
    out: list[tuple[float, float]] = []
    for cost, acc in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or acc > out[-1][1]:
            out.append((cost, acc))
    return out


def on_frontier(point: tuple[float, float], baselines: list[tuple[float, float]], tol: float = 1e-9) -> bool:
    """Is `point` on or above the fixed routers' frontier? The frontier is linear between its points (a random
    mix of two routers reaches any point between them), flat after the last, and below the cheapest router
    linear from (0, 0): mixing that router with "answer nothing" (free, never right) reaches those points."""
    front = frontier(baselines)
    cost, acc = point
    if not front:
        return True
    if cost < front[0][0]:
        return acc >= front[0][1] * cost / front[0][0] - tol
    best = front[-1][1]
    for (c0, a0), (c1, a1) in zip(front, front[1:], strict=False):
        if c0 <= cost <= c1:
            best = a0 + (a1 - a0) * ((cost - c0) / (c1 - c0) if c1 > c0 else 1.0)
            break
    return acc >= best - tol
