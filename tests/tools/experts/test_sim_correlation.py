"""Simulated experts whose mistakes go together (tools/experts/sim.py): each expert's accuracy is unchanged, two
experts are right (and wrong) together more often than independence gives, more so within a family, and wrong
experts share the task's common wrong answer at the configured rate; with no correlation nothing changes."""

from __future__ import annotations

import asyncio

import pytest

from orchestra.types import Task, ToolContext
from tools.experts.sim import SimExpert, unit_draw
from tools.pricing import PriceTable

N = 3000
DISTRACTORS = [str(k) for k in range(20)]


def expert(name: str, family: str = "", **kw) -> SimExpert:
    prices = PriceTable(overrides={name: (0.1, 0.1)})
    return SimExpert(name, name, prices, skill={"f": 0.64}, family=family, **kw)


def replies(e: SimExpert) -> list[tuple[bool, str]]:
    async def all_of() -> list:
        out = []
        for i in range(N):
            task = Task(id=f"t{i}", problem="q", answer="gold", meta={"family": "f", "difficulty": 1,
                                                                      "distractors": DISTRACTORS})
            r = await e.complete([{"role": "user", "content": "q"}], ctx=ToolContext(task=task))
            out.append((r.meta["sim_correct"], r.meta["answer"]))
        return out

    return asyncio.run(all_of())


def both(a: list, b: list) -> tuple[float, float]:
    """(P(both right), P(same answer | both wrong))."""
    right = sum(x[0] and y[0] for x, y in zip(a, b, strict=True)) / N
    wrong = [(x[1], y[1]) for x, y in zip(a, b, strict=True) if not x[0] and not y[0]]
    return right, sum(x == y for x, y in wrong) / len(wrong)


def test_without_correlation_the_draws_are_the_independent_ones():
    r = replies(expert("m1"))
    assert [c for c, _ in r] == [unit_draw("correct", 0, f"t{i}", "m1", 0, "answer") < 0.64 for i in range(N)]


def test_correlated_mistakes_keep_each_accuracy_and_raise_agreement():
    kw = {"rho_task": 0.6, "rho_family": 0.15, "shared_distractor": 0.6}
    a, b, c = replies(expert("m1", "x", **kw)), replies(expert("m2", "y", **kw)), replies(expert("m3", "x", **kw))
    for r in (a, b, c):
        assert sum(x for x, _ in r) / N == pytest.approx(0.64, abs=0.03)
    cross, same_wrong = both(a, b)
    within, _ = both(a, c)
    assert cross > 0.64 ** 2 + 0.06 and within > cross + 0.01  # vs 0.41 independent; the family adds more
    assert same_wrong == pytest.approx(0.36 + 0.64 * 0.05, abs=0.07)  # s^2, plus chance collisions of 20 options
    ind_right, ind_same = both(replies(expert("m1")), replies(expert("m2")))
    assert ind_right == pytest.approx(0.64 ** 2, abs=0.03) and ind_same < 0.1


def test_bad_correlations_are_refused():
    with pytest.raises(ValueError, match="rho_task"):
        expert("m", rho_task=0.7, rho_family=0.4)
