"""Route hints, the router's side: each task's per-plan estimates stored where the prompt reads them.

The prompt shows the policy one line computed from these estimates under the task's own preference vector
(`agent.route_hints`; the line, why it looks as it does and what it measured: orchestra/agent/hints.py). This module
writes them: `attach` stores row i of a router's Expected in tasks[i].meta[HINT_KEY].
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestra.agent.hints import HINT_KEY
from orchestra.routing.estimator import Expected
from orchestra.routing.plans import Plan
from orchestra.types import Task


def attach(tasks: Sequence[Task], exp: Expected, plans: Sequence[Plan], cost_scale: float, latency_scale: float
           ) -> None:
    """Store row i of `exp` in tasks[i].meta[HINT_KEY] (in place: the caller's task objects carry them on)."""
    if len(tasks) != exp.p_correct.shape[0]:
        raise ValueError(f"route hints: {exp.p_correct.shape[0]} estimate rows for {len(tasks)} tasks")
    calls = [[list(c) for c in p.calls] for p in plans]
    for i, task in enumerate(tasks):
        task.meta[HINT_KEY] = {
            "plans": [p.name for p in plans], "calls": calls,
            "p_correct": [round(float(v), 4) for v in exp.p_correct[i]],
            "cost_usd": [float(f"{v:.4g}") for v in exp.cost_usd[i]],
            "latency_s": [round(float(v), 3) for v in exp.latency_s[i]],
            "cost_scale": float(cost_scale), "latency_scale": float(latency_scale)}
