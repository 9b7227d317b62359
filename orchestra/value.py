"""The scalar reward's value, written once: R = P_acc·r − P_cost·$/cost_scale − P_lat·s/latency_scale + Σ_t P_t·m_t.

r is the 0/1 outcome, $ and s the episode's dollars and seconds, m_t its calls of tier t (a `tool:<t>` weight);
missing weights are 0. reward/rubric.py's `scalar` rubric scores an episode with it, and routing chooses plans by it
(orchestra/routing/estimator.py, holdout.py; the prompt's router line, orchestra/agent/hints.py) with P(correct) for
r: the rubric is linear in r, so its expectation is the same formula. The terms work on floats and on numpy arrays
alike (each caller shapes its own). Ground floor: imports nothing of the core, so both reward/ and the prompt read it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np


def scalar_terms(pref: Mapping[str, float], accuracy: Any, cost_usd: Any, latency_s: Any, cost_scale: float,
                 latency_scale: float, tool_count: Callable[[str], Any] = lambda tier: 0.0) -> dict[str, Any]:
    """Each weighted term, keyed by feature (`tool:<t>` terms in sorted order): `tool_count(t)` is the episode's (or
    each plan's) number of calls of tier t."""
    terms = {"accuracy": pref.get("accuracy", 0.0) * accuracy,
             "cost": -(pref.get("cost", 0.0) * cost_usd / cost_scale),
             "latency": -(pref.get("latency", 0.0) * latency_s / latency_scale)}
    for k in sorted(pref):
        if k.startswith("tool:"):
            terms[k] = pref[k] * tool_count(k[5:])
    return terms


def scalar_value(pref: Mapping[str, float], accuracy: Any, cost_usd: Any, latency_s: Any, cost_scale: float,
                 latency_scale: float, tool_count: Callable[[str], Any] = lambda tier: 0.0) -> Any:
    """R itself: the terms summed in their order (the rubric's own sum, so both give the same bits)."""
    return sum(scalar_terms(pref, accuracy, cost_usd, latency_s, cost_scale, latency_scale, tool_count).values())


def expected_value(p_correct: np.ndarray, cost_usd: np.ndarray, latency_s: np.ndarray,
                   tool_counts: Sequence[Mapping[str, int]], pref: Mapping[str, float], cost_scale: float,
                   latency_scale: float) -> np.ndarray:
    """[tasks, plans] expected reward from [tasks, plans] estimates; `tool_counts[j]`: plan j's calls per tier (what
    `tool:<tier>` weights count). The scalar rubric's value with P(correct) for the 0/1 outcome."""
    def per_plan(tier: str) -> np.ndarray:
        return np.array([counts.get(tier, 0) for counts in tool_counts], dtype=float)[None, :]

    return scalar_value(pref, p_correct, cost_usd, latency_s, cost_scale, latency_scale, per_plan)
