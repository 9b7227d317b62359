"""The intervals of orchestra/eval/stats.py: Wilson for 0/1 outcomes (checked by hand), the seeded bootstrap for
means of continuous values, and the paired bootstrap of a difference between two policies on the same tasks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orchestra.eval.stats import (
    bootstrap_ci,
    fmt_diff,
    frontier_accuracy,
    interval,
    mean_ci,
    paired_bootstrap_diff,
    wilson_ci,
)


def wilson_by_hand(k: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("k,n", [(3, 4), (0, 10), (10, 10), (37, 120)])
def test_wilson_matches_the_formula(k, n):
    assert wilson_ci(k, n) == pytest.approx(wilson_by_hand(k, n), abs=1e-9)


def test_wilson_stays_inside_0_1_where_the_normal_approximation_does_not():
    lo, hi = wilson_ci(9, 10)
    assert 0.0 < lo < 0.9 < hi < 1.0  # normal approximation: 0.9 ± 0.186 reaches 1.086
    assert wilson_ci(0, 5)[0] == 0.0 and wilson_ci(0, 5)[1] > 0.0  # no outcome seen still leaves room
    assert all(math.isnan(x) for x in wilson_ci(0, 0))


def test_interval_picks_wilson_for_0_1_and_the_bootstrap_otherwise():
    iv = interval([1, 0, 1, 1])
    assert (iv.lo, iv.hi) == pytest.approx(wilson_by_hand(3, 4), abs=1e-9) and iv.mean == 0.75
    values = list(np.random.default_rng(0).normal(5.0, 1.0, 60))
    b = interval(values)
    assert b.lo < np.mean(values) < b.hi and 0.3 < b.hi - b.lo < 0.8  # about 2 * 1.96 / sqrt(60) = 0.51
    assert interval(values) == b  # seeded: the same values give the same interval
    assert bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0) and bootstrap_ci([4.0]) == (4.0, 4.0)


def test_mean_ci_keeps_its_shape_for_callers():
    m, h = mean_ci([1.0, 0.0, 1.0, 1.0])
    lo, hi = wilson_by_hand(3, 4)
    assert m == 0.75 and h == pytest.approx((hi - lo) / 2, abs=1e-9)
    assert mean_ci([3.0]) == (3.0, 0.0) and math.isnan(mean_ci([])[0])


def test_paired_bootstrap_excludes_zero_for_a_clear_shift_and_includes_it_for_noise():
    rng = np.random.default_rng(1)
    base = rng.normal(0.0, 3.0, 80)  # per-task difficulty, shared by both policies: it cancels in the pairs
    shifted = paired_bootstrap_diff(base + 0.5 + rng.normal(0, 0.3, 80), base)
    assert shifted["excludes_zero"] == 1.0 and 0.35 < shifted["lo"] < 0.5 < shifted["hi"] < 0.65
    noise = paired_bootstrap_diff(base + rng.normal(0, 0.3, 80), base)
    assert noise["excludes_zero"] == 0.0 and noise["lo"] < 0.0 < noise["hi"]
    again = paired_bootstrap_diff(base + 0.5 + np.random.default_rng(1).normal(0, 0.3, 80), base)
    assert again["n"] == 80.0 and fmt_diff(shifted).startswith("+0.")
    assert paired_bootstrap_diff([1, 1, 0, 1], [0, 1, 0, 0]) == paired_bootstrap_diff([1, 1, 0, 1], [0, 1, 0, 0])


def test_paired_bootstrap_averages_the_seeds_of_a_task_first():
    a, b = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    d = paired_bootstrap_diff(a, b, groups=["t1", "t1", "t2", "t2", "t3", "t3"])
    assert d["n"] == 3.0 and d["diff"] == pytest.approx(0.5)  # task means 0.5, 1.0, 0.0
    with pytest.raises(ValueError, match="same 1-d shape"):
        paired_bootstrap_diff([1.0, 2.0], [1.0])


def test_frontier_accuracy_mixes_routers():
    pts = [(1.0, 0.5), (2.0, 0.4), (4.0, 0.9)]
    assert frontier_accuracy(2.5, pts) == pytest.approx(0.7)  # between (1, .5) and (4, .9)
    assert frontier_accuracy(0.5, pts) == pytest.approx(0.25)  # half of the cheapest, mixed with answering nothing
    assert frontier_accuracy(9.0, pts) == pytest.approx(0.9)
