"""Evaluation statistics: per (policy, preference) means with 95% intervals, paired differences, and the
accuracy-vs-$ frontier.

Intervals come from scipy, never from a normal approximation (which gives impossible bounds such as accuracy
1.1 on small samples): `wilson_ci` for 0/1 outcomes (scipy.stats.binomtest's Wilson score interval),
`bootstrap_ci` for means of continuous values (scipy.stats.bootstrap, BCa, fixed seed), `interval` picks the
right one, and `paired_bootstrap_diff` is the interval of a mean difference between two policies on the same
tasks (per-task differences resampled together; `paired_records` pairs evaluator records), which every gain a
report or bench/quality.py prints should carry; `paired_log_fall` the interval of the fall of $ between two
preferences on the same tasks (the verdict's steps). `summarize` gives per-row means with their intervals from the
runner's episode records (`<key>_lo`, `<key>_hi`, and `<key>_ci`, half the interval's width, for callers that draw
± bars); `frontier` /
`on_frontier` / `frontier_accuracy` say where a policy sits against the fixed routers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

LEVEL = 0.95
SEED = 0  # bootstrap resampling is seeded: the same records always give the same interval
RESAMPLES = 4999


@dataclass(frozen=True)
class Interval:
    mean: float
    lo: float
    hi: float

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2.0


def wilson_ci(successes: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a proportion (scipy.stats.binomtest(...).proportion_ci(method="wilson"));
    (nan, nan) for n = 0."""
    from scipy.stats import binomtest

    if n <= 0:
        return float("nan"), float("nan")
    ci = binomtest(int(successes), int(n)).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def bootstrap_ci(values: Sequence[float], level: float = LEVEL, seed: int = SEED,
                 n_resamples: int = RESAMPLES) -> tuple[float, float]:
    """BCa bootstrap interval of the mean (scipy.stats.bootstrap, seeded). Fewer than 2 values, or values that
    never vary, give the mean itself at both ends: resampling them cannot show any spread."""
    from scipy.stats import bootstrap

    v = np.asarray(values, dtype=float)
    if len(v) == 0:
        return float("nan"), float("nan")
    m = float(v.mean())
    if len(v) < 2 or np.all(v == v[0]):
        return m, m
    res = bootstrap((v,), np.mean, confidence_level=level, n_resamples=n_resamples, rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):  # BCa degenerates on near-constant data: percentile then
        res = bootstrap((v,), np.mean, confidence_level=level, n_resamples=n_resamples, method="percentile",
                        rng=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return min(lo, m), max(hi, m)


def is_binary(values: Sequence[float]) -> bool:
    return len(values) > 0 and all(v in (0, 1) for v in values)


def interval(values: Sequence[float], level: float = LEVEL, binary: bool | None = None) -> Interval:
    """Mean and 95% interval: Wilson for 0/1 values (`binary` None: detected), the bootstrap otherwise."""
    v = [float(x) for x in values]
    if not v:
        return Interval(float("nan"), float("nan"), float("nan"))
    m = sum(v) / len(v)
    if binary if binary is not None else is_binary(v):
        lo, hi = wilson_ci(round(sum(v)), len(v), level)
    else:
        lo, hi = bootstrap_ci(v, level)
    return Interval(m, lo, hi)


def mean_ci(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """(mean, half the width of its interval) at the level a two-sided normal `z` stands for (1.96: 95 %): Wilson
    for 0/1 values, the bootstrap for others; half-width 0 for fewer than 2 values (kept for callers of the
    normal-approximation version; `interval` gives both ends)."""
    from scipy.stats import norm

    if not values:
        return float("nan"), 0.0
    if len(values) < 2:
        return float(values[0]), 0.0
    iv = interval(values, level=round(float(2 * norm.cdf(z) - 1), 4))  # 1.96 -> exactly 0.95
    return iv.mean, iv.half_width


def paired_bootstrap_diff(a: Sequence[float], b: Sequence[float], groups: Sequence[Any] | None = None,
                          level: float = LEVEL, seed: int = SEED, n_resamples: int = RESAMPLES) -> dict[str, float]:
    """Mean of a − b over paired observations (the same task under two policies) with its bootstrap interval:
    the per-task differences are resampled, so what the two share (a task's difficulty) cancels. `groups` (e.g.
    task ids, one per pair): pairs of one group are averaged first (several seeds of a task are one draw, not
    several). Returns {diff, lo, hi, n (draws), excludes_zero (1.0 / 0.0)}."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired_bootstrap_diff: a and b need the same 1-d shape, got {x.shape} and {y.shape}")
    d = x - y
    if groups is not None:
        if len(groups) != len(d):
            raise ValueError(f"paired_bootstrap_diff: {len(groups)} groups for {len(d)} pairs")
        by: dict[Any, list[float]] = {}
        for g, v in zip(groups, d, strict=True):
            by.setdefault(g, []).append(float(v))
        d = np.array([sum(v) / len(v) for v in by.values()])
    lo, hi = bootstrap_ci(d, level, seed, n_resamples)
    diff = float(d.mean()) if len(d) else float("nan")
    return {"diff": diff, "lo": lo, "hi": hi, "n": float(len(d)), "excludes_zero": float(lo > 0 or hi < 0)}


def paired_log_fall(before: dict[str, float], after: dict[str, float], level: float = LEVEL, seed: int = SEED,
                    n_resamples: int = RESAMPLES) -> tuple[float, float, float]:
    """(estimate, lo, hi) of ln(mean before / mean after) over the tasks both dicts hold (task id -> mean $ at
    two points of one curve): the fall of $ between two preferences on the same tasks, its interval a paired
    percentile bootstrap (scipy.stats.bootstrap, seeded; tasks resampled together, so what a task costs at both
    points cancels). Identical $ on every task give (0, 0, 0): no resample can show a fall; $0 after (before) gives
    inf (-inf) at all three, as the means do; nan where no task is shared or a $ is nan or negative."""
    from scipy.stats import bootstrap

    both = sorted(set(before) & set(after))
    x, y = (np.array([d[k] for k in both], dtype=float) for d in (before, after))
    if not both or not (np.all(x >= 0) and np.all(y >= 0)):  # nan fails the comparison too
        return float("nan"), float("nan"), float("nan")
    if np.array_equal(x, y):
        return 0.0, 0.0, 0.0
    if not (x.mean() > 0 and y.mean() > 0):
        edge = math.inf if y.mean() == 0 else -math.inf
        return edge, edge, edge
    est = float(math.log(x.mean() / y.mean()))
    if len(both) < 2:  # one task: nothing to resample
        return est, est, est

    def fall(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(np.mean(a, axis=axis) / np.mean(b, axis=axis))

    res = bootstrap((x, y), fall, paired=True, vectorized=True, confidence_level=level, n_resamples=n_resamples,
                    method="percentile", rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    # a resample whose after-mean is $0 falls infinitely: an unbounded upper end, never a nan
    return est, min(lo, est) if not math.isnan(lo) else est, max(hi, est) if not math.isnan(hi) else math.inf


def paired_records(records: list[dict[str, Any]], a: tuple[str, str | None], b: tuple[str, str | None],
                   key: str = "correct", scale: float = 1.0) -> dict[str, float] | None:
    """`paired_bootstrap_diff` of `key` (times `scale`) between two (policy, preference) groups of evaluator records,
    paired on (task, seed) and grouped by task; a preference of None takes the policy's records under any (fixed
    routers run under one). None when the two share no (task, seed)."""
    def pick(policy: str, pref: str | None) -> dict[tuple[str, int], float]:
        return {(r["task_id"], r["seed"]): scale * float(r[key]) for r in records
                if r["policy"] == policy and (pref is None or r["preference"] == pref)}

    x, y = pick(*a), pick(*b)
    both = sorted(set(x) & set(y))
    if not both:
        return None
    return paired_bootstrap_diff([x[k] for k in both], [y[k] for k in both], groups=[k[0] for k in both])


def fmt_diff(d: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
    """'+0.051 [+0.012, +0.090]': a paired difference with its interval, times `scale` (100: points)."""
    return f"{scale * d['diff']:+.{digits}f} [{scale * d['lo']:+.{digits}f}, {scale * d['hi']:+.{digits}f}]"


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, preference): n, accuracy (Wilson interval), cost (cents), latency (s) and score (each
    with a bootstrap interval) as `<key>`, `<key>_lo`, `<key>_hi` and `<key>_ci` (half the interval's width);
    tool_mix = share of tool calls per tool id; answered = share of episodes that gave an answer."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["policy"], r["preference"]), []).append(r)
    rows = []
    for (policy, pref), rs in groups.items():
        row: dict[str, Any] = {"policy": policy, "preference": pref, "n": len(rs),
                               "seeds": sorted({r["seed"] for r in rs})}
        for key, values, binary in (("accuracy", [float(r["correct"]) for r in rs], True),
                                    ("cost_cents", [100.0 * r["cost_usd"] for r in rs], False),
                                    ("latency_s", [r["latency_s"] for r in rs], False),
                                    ("score", [r["reward"] for r in rs], False)):
            iv = interval(values, binary=binary)
            row[key], row[f"{key}_lo"], row[f"{key}_hi"] = iv.mean, iv.lo, iv.hi
            row[f"{key}_ci"] = iv.half_width if len(values) > 1 else 0.0
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


def frontier_accuracy(cost: float, points: list[tuple[float, float]]) -> float:
    """The accuracy the routers at `points` (cost, accuracy) reach at `cost` by mixing: their frontier, linear
    between its points (a random mix of two routers reaches any point between them), flat after the last, and
    below the cheapest linear from (0, 0) (mixing that router with "answer nothing", free and never right)."""
    front = frontier(points)
    if not front:
        return float("nan")
    if cost < front[0][0]:
        return front[0][1] * cost / front[0][0]
    for (c0, a0), (c1, a1) in zip(front, front[1:], strict=False):
        if c0 <= cost <= c1:
            return a0 + (a1 - a0) * ((cost - c0) / (c1 - c0) if c1 > c0 else 1.0)
    return front[-1][1]


def on_frontier(point: tuple[float, float], baselines: list[tuple[float, float]], tol: float = 1e-9) -> bool:
    """Is `point` (cost, accuracy) on or above the fixed routers' frontier (`frontier_accuracy`)?"""
    return not baselines or point[1] >= frontier_accuracy(point[0], baselines) - tol
