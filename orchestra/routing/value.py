"""The expected `scalar` reward of plans from their estimates: the one formula the estimator router chooses by
(orchestra/routing/estimator.py) and the policy's route hints are rendered with (orchestra/routing/hints.py).

reward/rubric.scalar_reward is linear in correctness, so its expectation is the same formula with P(correct) for
the 0/1 outcome. Written out on arrays here (the core does not import reward/);
tests/orchestra/routing/test_estimator.py pins it to scalar_reward. No imports from the rest of the package: the
prompt builder uses it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def expected_value(p_correct: np.ndarray, cost_usd: np.ndarray, latency_s: np.ndarray,
                   tool_counts: Sequence[Mapping[str, int]], pref: Mapping[str, float], cost_scale: float,
                   latency_scale: float) -> np.ndarray:
    """[tasks, plans] expected reward under one preference vector; `tool_counts[j]`: plan j's calls per tier
    (what `tool:<tier>` weights count)."""
    ev = (pref.get("accuracy", 0.0) * p_correct - pref.get("cost", 0.0) * cost_usd / cost_scale
          - pref.get("latency", 0.0) * latency_s / latency_scale)
    tool_terms = np.array([sum(w * counts.get(k[5:], 0) for k, w in pref.items() if k.startswith("tool:"))
                           for counts in tool_counts], dtype=float)
    return ev + tool_terms[None, :]
