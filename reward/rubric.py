"""Rubrics: what an episode is worth, given its correctness, cost, latency, tool use and a preference vector P.

`toolorchestra` (the default; DESIGN.md "Reward"), per group of G episodes of one task:
  features x(τ): `accuracy` ∈ {0,1}; `cost` = −$; `latency` = −seconds; `tool:<id>` = turns whose first call
  used that tool id. Each feature is min-max normalised over the group (incorrect episodes included); a
  feature constant over the group contributes 0. R(τ) = 0 if τ is incorrect, else Σ_f P_f · x̂_f(τ).
  Sign convention, and how it differs from the original ToolOrchestra code: the original normalises the raw
  cost and latency (more $ → larger x̂) and adds P_f · x̂_f, so with the usual positive preference weights it
  REWARDS spending more unless P_cost is made negative. We negate cost and latency before normalising, so
  larger is always better and a positive P_cost / P_latency means "I want it cheap / fast".
`scalar` (per episode, no group; verl's compute_score and serving):
  R = P_acc·r − P_cost·$/cost_scale − P_lat·s/latency_scale + Σ_t P_t·m_t  [− unanswered_penalty].
  The optional last term (training only; `reward.unanswered_penalty`) is charged when the episode ended without
  an answer: otherwise an ill-formed episode costs nothing and scores like a free wrong answer, and a policy
  pushed by a cost-heavy preference can drift into never answering, where every group is flat and RL stops.
Every Reward carries `terms` (one entry per weighted feature; they sum to `value`) and `features` (the raw
values), so each number is traceable. `RUBRICS` names each rubric's group scorer, its advantage function
(reward/advantages.py) and whether it needs the whole group; extend it with `register_rubric`. Judging is
reward/judges.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestra.types import Preference, Trajectory, check_preference
from orchestra.value import scalar_terms
from reward.advantages import (
    GroupAdvantages,
    import_verl_math,
    scalar_group_advantages,
    toolorchestra_advantages,
)


@dataclass
class Reward:
    value: float
    terms: dict[str, float]  # feature -> P_f · x̂_f (toolorchestra) or its signed scalar term; sum = value
    correct: bool
    features: dict[str, float]  # raw features: accuracy, cost (−$), latency (−s), tool:<id> counts
    normalized: dict[str, float] = field(default_factory=dict)  # toolorchestra: x̂_f over the group

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _constant(lo: float, hi: float) -> bool:
    # A relative tolerance so that float noise (e.g. 0.1 + 0.2 vs 0.3) does not create a spurious spread.
    return hi - lo <= 1e-12 * max(1.0, abs(lo), abs(hi))


def _finite(name: str, values: Sequence[float]) -> list[float]:
    out = [float(v) for v in values]
    for i, v in enumerate(out):
        if not math.isfinite(v):
            raise ValueError(f"{name}[{i}] must be finite, got {v!r}")
    return out


def episode_features(correct: bool, cost_usd: float, latency_s: float,
                     tool_counts: dict[str, int]) -> dict[str, float]:
    """Raw features, signed so that larger is better (cost and latency negated)."""
    feats = {"accuracy": 1.0 if correct else 0.0, "cost": -float(cost_usd), "latency": -float(latency_s)}
    for tool, n in sorted(tool_counts.items()):
        feats[f"tool:{tool}"] = float(n)
    return feats


def toolorchestra_group(trajs: Sequence[Trajectory], correct: Sequence[bool], costs: Sequence[float],
                        latencies: Sequence[float], pref: dict[str, float]) -> list[Reward]:
    """The preference-weighted, group-normalised reward of DESIGN.md for the G episodes of one task."""
    n = len(trajs)
    if not (len(correct) == len(costs) == len(latencies) == n):
        raise ValueError(f"toolorchestra_group: {n} trajectories but {len(correct)} verdicts, {len(costs)} "
                         f"costs and {len(latencies)} latencies")
    if n == 0:
        return []
    pref = check_preference(pref)
    costs, latencies = _finite("costs", costs), _finite("latencies", latencies)
    rows = zip(trajs, correct, costs, latencies, strict=True)
    feats = [episode_features(bool(c), usd, s, t.tool_counts) for t, c, usd, s in rows]
    names = sorted({k for f in feats for k in f} | set(pref))
    # a tool nobody in the group used is 0 for everyone (constant), so it can never earn a term
    columns = {k: [f.get(k, 0.0) for f in feats] for k in names}
    normed: list[dict[str, float]] = [{} for _ in range(n)]
    for k, col in columns.items():
        lo, hi = min(col), max(col)
        for i, x in enumerate(col):
            normed[i][k] = 0.0 if _constant(lo, hi) else (x - lo) / (hi - lo)
    out = []
    for i in range(n):
        ok = bool(correct[i])
        terms = {k: (pref[k] * normed[i][k] if ok else 0.0) for k in sorted(pref)}
        out.append(Reward(value=sum(terms.values()), terms=terms, correct=ok,
                          features={k: columns[k][i] for k in names}, normalized=normed[i]))
    return out


def scalar_reward(correct: bool, cost_usd: float, latency_s: float, tool_counts: dict[str, int],
                  pref: dict[str, float], cost_scale: float = 0.01, latency_scale: float = 10.0, *,
                  answered: bool = True, unanswered_penalty: float = 0.0) -> Reward:
    """R = P_acc·r − P_cost·$/cost_scale − P_lat·s/latency_scale + Σ_t P_t·m_t (orchestra/value.py, the one
    place the formula is written), minus `unanswered_penalty` when the episode gave no answer."""
    if not (cost_scale > 0 and latency_scale > 0):
        raise ValueError(f"cost_scale and latency_scale must be > 0, got {cost_scale} and {latency_scale}")
    pref = check_preference(pref)
    cost_usd, latency_s = _finite("cost_usd", [cost_usd])[0], _finite("latency_s", [latency_s])[0]
    feats = episode_features(correct, cost_usd, latency_s, tool_counts)
    terms = scalar_terms(pref, feats["accuracy"], cost_usd, latency_s, cost_scale, latency_scale,
                         lambda tier: feats.get(f"tool:{tier}", 0.0))
    if unanswered_penalty and not answered:
        terms["unanswered"] = -float(unanswered_penalty)
    return Reward(value=sum(terms.values()), terms=terms, correct=bool(correct), features=feats)


# ---------------------------------------------------------------- the registry
@dataclass
class Judged:
    """One judged member of a group, as rubrics see it: its episode, verdict, accounted $ and seconds, and its
    own task's preference vector."""

    traj: Trajectory
    correct: bool
    cost_usd: float
    latency_s: float
    pref: Preference


@dataclass(frozen=True)
class Rubric:
    """`rewards(members, group_pref, **settings)` scores a group's judged members (group_pref: the first
    member's task's P); `advantages(groups, min_std, clip)` turns every group's rewards into (advantages,
    dropped) per group; `grouped`: the rubric needs the whole group before it can score (the reward actor's
    barrier; under verl, the RewardActor rather than the per-episode reward function); `warm_up`: imports what
    its scoring needs, run by the reward actor in a thread as it starts (None: nothing heavy)."""

    rewards: Callable[..., list[Reward]]
    advantages: Callable[..., GroupAdvantages]
    grouped: bool
    warm_up: Callable[[], None] | None = None


def _toolorchestra(members: Sequence[Judged], group_pref: Preference, **_: Any) -> list[Reward]:
    return toolorchestra_group([m.traj for m in members], [m.correct for m in members],
                               [m.cost_usd for m in members], [m.latency_s for m in members], group_pref)


def _scalar(members: Sequence[Judged], group_pref: Preference, *, cost_scale: float = 0.01,
            latency_scale: float = 10.0, unanswered_penalty: float = 0.0, **_: Any) -> list[Reward]:
    return [scalar_reward(m.correct, m.cost_usd, m.latency_s, m.traj.tool_counts, m.pref, cost_scale, latency_scale,
                          answered=m.traj.terminated, unanswered_penalty=unanswered_penalty) for m in members]


RUBRICS: dict[str, Rubric] = {"toolorchestra": Rubric(_toolorchestra, toolorchestra_advantages, grouped=True),
                              "scalar": Rubric(_scalar, scalar_group_advantages, grouped=False,
                                                 warm_up=import_verl_math)}


def register_rubric(name: str, rubric: Rubric) -> None:
    RUBRICS[name] = rubric


def rubric_of(name: str) -> Rubric:
    """The named rubric; ValueError listing the known ones."""
    if name not in RUBRICS:
        raise ValueError(f"unknown rubric {name!r}; choose one of {tuple(RUBRICS)}")
    return RUBRICS[name]
