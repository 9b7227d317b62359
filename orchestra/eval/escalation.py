"""Escalation rates: does an orchestrator that consulted two experts call for more when their answers disagree?

Over episodes whose first two calls were `consult`s of two tiers that both answered (orchestra/agent/consults.py),
the next call is an escalation when it spends more (an `answer` call, or a third `consult`) and a stop when it is a
`submit`. `escalation(trajectories)` gives P(escalate | the two answers disagree) and P(escalate | they agree),
agreement as cascades judge it (orchestra/agent/consults.py `agree`), with the counts behind them; an episode
that ended before a third call (turns or budget ran out) is left out. A policy that reads its experts escalates
far more often on disagreement; one that ignores them escalates at one rate whatever they said.
`reask_disagree` / `reask_agree` are the part of those escalations that asked one of the two consulted tiers again
(a cheap fresh answer, not a stronger tier): RL found that move under a cost-heavy preset (docs/quality.md, RL's positive control).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from orchestra.agent.consults import agree


def decision(traj: Any) -> tuple[bool, bool] | None:
    """(the two answers agreed, the next call escalated) for an episode that consulted two tiers that both answered
    and then made a third call; None for any other."""
    recs = list(getattr(traj, "tool_records", None) or [])
    if len(recs) < 3 or any(r.name != "consult" or not r.result.ok or r.result.candidate is None for r in recs[:2]):
        return None
    return agree(recs[0].result.candidate, recs[1].result.candidate), recs[2].name != "submit"


def reasked(traj: Any) -> bool:
    """The third call asked a tier the first two consulted (after `decision` found an escalation)."""
    recs = traj.tool_records
    return recs[2].name != "submit" and recs[2].tool_id in (recs[0].tool_id, recs[1].tool_id)


def escalation(trajectories: Iterable[Any]) -> dict[str, float]:
    """{escalation_disagree, escalation_agree (nan where no such episode), reask_disagree, reask_agree (the share of
    the pairs whose escalation re-asked a consulted tier), pairs_disagree, pairs_agree}; {} when no episode
    consulted two experts first."""
    counts = {True: [0, 0, 0], False: [0, 0, 0]}  # agreed -> [episodes, escalations, re-asks]
    for traj in trajectories:
        if (d := decision(traj)) is None:
            continue
        counts[d[0]][0] += 1
        counts[d[0]][1] += int(d[1])
        counts[d[0]][2] += int(d[1] and reasked(traj))
    if not counts[True][0] and not counts[False][0]:
        return {}

    def rate(c: list[int], i: int = 1) -> float:
        return c[i] / c[0] if c[0] else float("nan")

    return {"escalation_disagree": rate(counts[False]), "escalation_agree": rate(counts[True]),
            "reask_disagree": rate(counts[False], 2), "reask_agree": rate(counts[True], 2),
            "pairs_disagree": float(counts[False][0]), "pairs_agree": float(counts[True][0])}
