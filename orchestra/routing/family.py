"""The per-family fixed router: for each task family and preference, the plan with the best mean training reward.

The baseline the estimator router (orchestra/routing/estimator.py) has to beat on its home ground: it sees only
the task's family (`task.meta["family"]`: MMLU-Pro's subject, a routing log's category) and is fitted on the same
training outcomes. The mean `scalar` reward of a plan over a family's training tasks is the expected-reward
formula on the family's mean correctness, $ and seconds (the rubric is linear in all three), so the choice per
(family, preference) is `expected_reward` on those means. A family unseen in training (or with fewer than
`min_tasks` tasks) falls back to the means over every training task. Unlike orchestra/eval/routing_bound.py (the
same kind of router chosen in hindsight on the evaluated tasks) this one is deployable: it never sees held-out
outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from orchestra.routing.estimator import Expected, expected_reward
from orchestra.routing.plans import Outcome, Plan
from orchestra.types import Preference, Task

ALL = "*"  # the fallback row: every training task


def family_of(task: Task, key: str = "family") -> str:
    return str(task.meta.get(key) or "all")


class FamilyRouter:
    """Per family, each plan's mean correctness, $ and seconds on the training tasks; the choice under a
    preference is the plan of highest mean reward (ties: the earlier plan)."""

    def __init__(self, plans: Sequence[Plan], key: str = "family", min_tasks: int = 1):
        self.plans, self.key, self.min_tasks = list(plans), key, int(min_tasks)
        self.means: dict[str, Expected] = {}  # family -> [1, plans] means
        self.n_tasks: dict[str, int] = {}

    def fit(self, tasks: Sequence[Task], outcomes: Sequence[Outcome]) -> FamilyRouter:
        return self.fit_families({t.id: family_of(t, self.key) for t in tasks}, outcomes)

    def fit_families(self, fam: Mapping[str, str], outcomes: Sequence[Outcome]) -> FamilyRouter:
        """`fit` from task id -> family (e.g. exploration records, which carry each task's family)."""
        col = {p.name: j for j, p in enumerate(self.plans)}
        groups = sorted(set(fam.values()))
        P = len(self.plans)
        acc = {g: np.zeros((4, P)) for g in [*groups, ALL]}  # correct, $, seconds, count
        for o in outcomes:
            if o.task_id not in fam or o.plan not in col:
                continue
            for g in (fam[o.task_id], ALL):
                acc[g][:, col[o.plan]] += (float(o.correct), o.cost_usd, o.latency_s, 1.0)
        if np.any(acc[ALL][3] == 0):
            missing = [p.name for p, n in zip(self.plans, acc[ALL][3], strict=True) if n == 0]
            raise ValueError(f"no outcomes for plan(s) {missing} on the given tasks")
        self.n_tasks = {g: sum(1 for f in fam.values() if f == g) for g in groups}
        self.n_tasks[ALL] = len(fam)
        self.means = {}
        for g, a in acc.items():
            if np.all(a[3] > 0):  # a family some plan was never played on is not fitted: it falls back
                self.means[g] = Expected(*(a[i:i + 1] / a[3] for i in range(3)))
        return self

    def expected(self, tasks: Sequence[Task]) -> Expected:
        if not self.means:
            raise RuntimeError("FamilyRouter.expected before fit")
        rows = [self._row(t) for t in tasks]
        return Expected(*(np.vstack([getattr(r, f) for r in rows]) for f in ("p_correct", "cost_usd", "latency_s")))

    def _row(self, task: Task) -> Expected:
        g = family_of(task, self.key)
        return self.means[g] if g in self.means and self.n_tasks.get(g, 0) >= self.min_tasks else self.means[ALL]

    def choose(self, tasks: Sequence[Task], prefs: Sequence[Preference], cost_scale: float, latency_scale: float
               ) -> list[Plan]:
        """The plan of best mean training reward in each task's family under its own preference."""
        return [self.plans[int(np.argmax(expected_reward(self._row(t), self.plans, pref, cost_scale,
                                                         latency_scale)[0]))] for t, pref in zip(tasks, prefs,
                                                                                                   strict=True)]

    def table(self, pref: Preference, cost_scale: float, latency_scale: float) -> dict[str, str]:
        """family -> the plan it routes to under `pref` (the fallback as "*")."""
        return {g: self.plans[int(np.argmax(expected_reward(e, self.plans, pref, cost_scale, latency_scale)[0]))].name
                for g, e in sorted(self.means.items())}


def routed_records(router: FamilyRouter, tasks: Sequence[Task], records: Sequence[dict[str, Any]], pref: Preference,
                   cost_scale: float, latency_scale: float, policy: str, preference: str) -> list[dict[str, Any]]:
    """The episodes of the plan `router` picks for each task under `pref`, taken from `records` of every plan played
    on `tasks` (evaluator records whose `policy` is the plan's name), relabelled `policy` / `preference`."""
    choice = {t.id: p.name for t, p in zip(tasks, router.choose(tasks, [pref] * len(tasks), cost_scale,
                                                                 latency_scale), strict=True)}
    return [{**r, "policy": policy, "preference": preference} for r in records
            if choice.get(r["task_id"]) == r["policy"]]
