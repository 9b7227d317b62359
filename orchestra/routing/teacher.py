"""The expected-value teacher: which route each training task should take under each preference vector.

Hindsight labels ("the cheapest tier that happened to be right on this task", what best-of-k demonstrations
and per-task GRPO groups reward) are nearly the same under every preference, because in training a tier is
always right or always wrong on a given task. What carries over to an unseen task is the *expected* reward of
a route given what the prompt shows. So each (task, vector) is labelled with the plan the estimator router
(orchestra/routing/estimator.py) rates best in expectation, and the policy is warm-started on those episodes.

Cross-fitting keeps the labels honest: the tasks are cut into `folds`; each fold is labelled by an estimator
fitted on the other folds only, so no label comes from a model that saw that task's own outcomes.
One exploration serves every vector: labels for any number of vectors cost only arithmetic.
Vectors per task: a fixed list (presets or weight specs, e.g. the cost-ordered presets and a ladder of cost
weights) plus `sampled` draws seeded by the task id: of the training sampler, or over a range of cost and latency
weights (`sample_cost`: orchestra/preferences.sample_range). Each draw is labelled with the plan best for that
very vector. Draws that land on the adherence sweep are redrawn (fixed vectors there are refused by the config
check), so the sweep holds no training vector. A 1M-parameter policy learns to read such vectors when the prompt
shows them in bins, one word per half decade of weight ÷ accuracy (agent.preference_levels); with the old, uneven
bins and fewer tasks it conflated them (docs/recipe.md).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from orchestra.preferences import (
    COST_ORDER,
    is_among,
    parse_preference,
    sample_preference,
    sample_range,
    sweep_vectors,
)
from orchestra.routing.estimator import Expected, RouteEstimator, expected_reward
from orchestra.routing.plans import Outcome, Plan
from orchestra.types import Preference, Task


@dataclass
class Label:
    task: Task  # with `pref` set to the vector it is labelled under
    plan: Plan
    expected: float  # the plan's expected reward under that vector
    margin: float  # how much better than the runner-up plan (0: a tie)


def label_vectors(task: Task, sampled: int, seed: int, fixed: Sequence[str] = COST_ORDER,
                  sample_cost: Sequence[float] = (), sample_latency: Sequence[float] = (0.1, 3.0),
                  latency_zero: float = 0.5) -> list[Preference]:
    """The vectors a task is labelled under: the fixed ones (preset names or `accuracy=1,cost=0.2` specs), then
    `sampled` draws seeded by (seed, task id): over [sample_cost] (and latency) when given, else the training
    sampler's. A draw that is an adherence-sweep vector is drawn again (fixed vectors on the sweep are refused by
    the config check, orchestra/config/checks.py, and by cluster/heldout.unseen_sweep)."""
    sweep = list(sweep_vectors().values())
    vectors = [parse_preference(p) for p in fixed]
    rng = random.Random(f"teacher:{seed}:{task.id}")
    tool_ids = sorted(task.model_mapping)
    for _ in range(sampled):
        if sample_cost:
            vectors.append(sample_range(rng, sample_cost, sample_latency, latency_zero, avoid=sweep))
            continue
        pref = sample_preference(rng, tool_ids)
        while is_among(pref, sweep):
            pref = sample_preference(rng, tool_ids)
        vectors.append(pref)
    return vectors


def cross_fitted(X: np.ndarray, task_ids: Sequence[str], outcomes: Sequence[Outcome], plans: Sequence[Plan],
                 folds: int = 5, seed: int = 0, C: float = 1.0, alpha: float = 1.0, n_meta: int = 0,
                 select_by: str = "log_loss", n_stats: int = 0) -> Expected:
    """Out-of-fold predictions: row i comes from an estimator that never saw task i's outcomes (each fold's
    estimator selects its own model, as the router's does: `n_meta`, `n_stats`, `select_by`)."""
    n = len(task_ids)
    if n < 2 * folds:
        raise ValueError(f"cross-fitting {folds} folds needs at least {2 * folds} tasks, got {n}")
    order = list(range(n))
    random.Random(f"folds:{seed}").shuffle(order)
    P = len(plans)
    out = Expected(np.zeros((n, P)), np.zeros((n, P)), np.zeros((n, P)))
    for f in range(folds):
        held = order[f::folds]
        keep = sorted(set(range(n)) - set(held))
        kept_ids = {task_ids[i] for i in keep}
        est = RouteEstimator(plans, C=C, alpha=alpha, seed=seed, select_by=select_by).fit(
            X[keep], [task_ids[i] for i in keep], [o for o in outcomes if o.task_id in kept_ids], n_meta, n_stats)
        e = est.expected(X[held])
        out.p_correct[held], out.cost_usd[held], out.latency_s[held] = e.p_correct, e.cost_usd, e.latency_s
    return out


def teacher_labels(tasks: Sequence[Task], exp: Expected, plans: Sequence[Plan], sampled: int, seed: int,
                   cost_scale: float, latency_scale: float, fixed: Sequence[str] = COST_ORDER,
                   sample_cost: Sequence[float] = (), sample_latency: Sequence[float] = (0.1, 3.0),
                   latency_zero: float = 0.5) -> list[Label]:
    """One label per (task, vector of `label_vectors`): the plan of highest expected reward under that vector
    (ties: the earlier plan)."""
    out = []
    for i, task in enumerate(tasks):
        row = Expected(exp.p_correct[i:i + 1], exp.cost_usd[i:i + 1], exp.latency_s[i:i + 1])
        for pref in label_vectors(task, sampled, seed, fixed, sample_cost, sample_latency, latency_zero):
            ev = expected_reward(row, plans, pref, cost_scale, latency_scale)[0]
            best = int(np.argmax(ev))
            runner_up = float(np.max(np.delete(ev, best))) if len(ev) > 1 else float(ev[best])
            out.append(Label(replace(task, pref=dict(pref)), plans[best], float(ev[best]), float(ev[best]) - runner_up))
    return out
