"""The prompt's router line (`agent.route_hints`): rendered from the per-plan estimates a router attached to the task.

A 1M-parameter policy cannot read a question well enough to tell which model will get it right: on recorded
routing logs it learned one plan per preset while its teacher's labels differed per question. The estimator router
can (a sentence embedding and per-plan fits). So every task carries the router's estimates in
`task.meta[HINT_KEY]` (P(correct), $ and seconds per plan, and the reward scales), and the prompt shows one line
computed from them under the task's own preference vector:

    Router (odds high): answer answer-2.

the plan of highest expected reward, written as the calls the policy would write, and how likely that plan is to
be right (one single-token word per band of P(correct)). An adaptive plan (orchestra/routing/cascade.py) is written as
its rule: "Router (odds high): consult answer-2, then consult answer-3; if they differ, answer answer-1." The line has a fixed length for one-call plans and the
plan comes last, so the tier id stands at a fixed distance from the policy's own tool call, and the preference
words above it at a fixed distance too: a 2-layer policy reads by position. The intent: a policy that copies the
line routes per question as well as its teacher, and RL learns where deviating pays. Measured (docs/quality.md,
"Per-question routing by the policy"): on MMLU-Pro replay the tiny policy copies it once the tool catalogue, which
lists every tier id, is left out of the prompt (`agent.tool_catalogue: none`) and SFT runs long enough (400 steps):
89-100 % agreement with the router per question; with the catalogue it did not. The line follows the preference, so
one task's estimates serve every vector it is rolled out under (preference-paired GRPO, sampled vectors).

The router writes the estimates (orchestra/routing/hints.py `attach`); this module only reads them, with the one
reward formula (orchestra/value.py) and the cascade-name grammar (orchestra/cascade_names.py), so the prompt builder
needs nothing of routing/. Whose estimates a task carries (cluster/warm_start.py, cluster/trainer.py,
actors/serve/wiring.py): training tasks the router was fitted on carry cross-fitted ones (from a fit that never saw
the task's own outcomes, as the teacher's labels are), other tasks the fitted router's own.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from orchestra.cascade_names import describe, is_cascade
from orchestra.types import Task
from orchestra.value import expected_value

HINT_KEY = "route_estimates"
# P(correct) bands of the suggested plan, highest first: one token each in the tiny tokenizer (the preference's
# level words), so every one-call hint has the same length
CONFIDENCE = ((0.8, "high"), (0.6, "medium"), (0.4, "low"), (0.0, "minimal"))


def suggestion(task: Task) -> tuple[str, list[list[str]], float] | None:
    """The plan of highest expected reward under `task.pref` (accuracy alone when empty): its name, its
    (tool, tier) calls and its P(correct); None when the task carries no estimates."""
    est: dict[str, Any] | None = task.meta.get(HINT_KEY)
    if not est:
        return None
    counts = [Counter(tier for _tool, tier in calls) for calls in est["calls"]]
    p = np.array([est["p_correct"]], dtype=float)
    ev = expected_value(p, np.array([est["cost_usd"]], dtype=float), np.array([est["latency_s"]], dtype=float),
                        counts, task.pref or {"accuracy": 1.0}, est["cost_scale"], est["latency_scale"])[0]
    best = int(np.argmax(ev))  # ties: the earlier plan, as the router's own choice
    return est["plans"][best], est["calls"][best], float(p[0, best])


def hint_text(task: Task) -> str:
    """The prompt line ("" without estimates)."""
    found = suggestion(task)
    if found is None:
        return ""
    name, calls, p = found
    word = next(w for bound, w in CONFIDENCE if p >= bound)
    if is_cascade(name):  # an adaptive plan: its consults, and when it escalates
        return f"Router (odds {word}): {describe(name)}."
    return f"Router (odds {word}): " + ", then ".join(f"{tool} {tier}" for tool, tier in calls) + "."
