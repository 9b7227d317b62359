"""Scoring finished episodes: judge each answer, account its cost and latency, apply the rubric, compute
advantages — one `Scored` record per episode holding every number it was built from.

`score_group(trajs, tasks, ...)` is what the RewardActor (actors/reward_actor.py), the trainer's held-out
evaluation and tests call; `score_episode` scores one episode under the scalar rubric without a group (the
evaluator, rejection-sampled SFT). Episodes that ended in `error` (an engine failure, or unaccountable cost) are not judged and are left
out of the rubric's min-max statistics (a crashed episode's near-zero cost would stretch everyone else's
scale); they get `failure_reward` and take part in the advantage baseline like any member.
Data sources an integration registered (orchestra/data/sources.py episode kinds; τ²-bench's `tau2/*`) are judged
by that kind's judge, which reads the verdict its runner left on the trajectory (τ² tasks have no gold answer);
the rest by the answer judges configured per data source (reward/judges.py). Rubrics come from the registry
in reward/rubric.py (group scorer + advantage function).
Per episode the breakdown is logged at DEBUG, per group a summary at INFO (logger "orchestra.reward").

Left to others: the group barrier and deadlines (the actor), what to do with the advantages (the learner).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestra.data.sources import episode_kind
from orchestra.types import Judgement, Task, Trajectory
from reward.cost import CostBreakdown, episode_cost, episode_latency
from reward.judges import LLMJudge, judge, judge_for
from reward.rubric import Judged, Reward, rubric_of, scalar_reward

log = logging.getLogger("orchestra.reward")


@dataclass
class Scored:
    traj_id: str  # the episode id
    uid: str
    task_id: str
    correct: bool
    reward: float
    terms: dict[str, float]
    advantage: float
    dropped: bool  # the group gave no learning signal (std <= min_std); advantage 0
    cost: dict[str, Any]  # CostBreakdown.to_dict()
    latency_s: float
    judgement: dict[str, Any]  # Judgement.to_dict()
    features: dict[str, float] = field(default_factory=dict)
    normalized: dict[str, float] = field(default_factory=dict)
    termination: str = ""
    rubric: str = ""
    status: str = "scored"  # scored | error (failure reward) | late (arrived after its group was scored)
    tool_counts: dict[str, int] = field(default_factory=dict)
    by_deadline: bool = False  # its group was scored by the barrier's deadline, without its missing members

    @property
    def cost_usd(self) -> float:
        """The episode's $ in all (the `total_usd` of its cost breakdown)."""
        return float(self.cost.get("total_usd", 0.0))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def failure_scored(traj: Trajectory | None, uid: str, task_id: str, reward: float, reason: str, status: str,
                   rubric: str = "") -> Scored:
    """A record for an episode that could not be scored normally (errored, late, scoring failure)."""
    zero = CostBreakdown(0.0, 0.0, 0.0, 0.0).to_dict()
    return Scored(traj_id=traj.episode_id if traj else "", uid=uid, task_id=task_id, correct=False,
                  reward=float(reward), terms={"failure": float(reward)}, advantage=0.0, dropped=True, cost=zero,
                  latency_s=0.0, judgement=Judgement(False, 0.0, "none", reason).to_dict(),
                  termination=traj.termination if traj else "error", rubric=rubric, status=status,
                  tool_counts=dict(traj.tool_counts) if traj else {})


async def _judge_one(traj: Trajectory, task: Task, judges: dict[str, str], **kw: Any) -> Judgement:
    found = episode_kind(task.data_source)
    if found is not None:  # an integration's own verdict (no gold string), left on the trajectory by its runner
        return found[1].judge(traj)
    gold = [task.answer] + [str(a) for a in task.meta.get("answer_aliases", [])]
    # the trajectory goes along for judges that read what its tools reported (`recorded`: replayed verdicts)
    return await judge(judge_for(task.data_source, judges), traj.answer, gold, task.problem, traj=traj, **kw)


async def score_group(trajs: Sequence[Trajectory], tasks: Task | Sequence[Task], *, rubric: str = "toolorchestra",
                      judges: dict[str, str] | None = None, min_std: float = 0.1, clip: float = 3.0,
                      cost_scale: float = 0.01, latency_scale: float = 10.0, price_in: float = 0.0,
                      price_out: float = 0.0, count_generation: bool = False, failure_reward: float = 0.0,
                      unanswered_penalty: float = 0.0, norm_adv_by_std: bool = True,
                      llm: LLMJudge | None = None, f1_threshold: float = 0.5,
                      math_timeout_s: float = 10.0) -> list[Scored]:
    """Score episodes; members sharing a `uid` form a group (the toolorchestra rubric needs one P per group:
    the first member's task's). `tasks` is one Task for all, or one per trajectory. Sets `traj.correct`."""
    scheme = rubric_of(rubric)
    trajs = list(trajs)
    tasks = [tasks] * len(trajs) if isinstance(tasks, Task) else list(tasks)
    if len(tasks) != len(trajs):
        raise ValueError(f"{len(trajs)} trajectories but {len(tasks)} tasks")
    judges = judges or {"default": "exact"}
    n = len(trajs)
    errors: dict[int, str] = {i: f"episode error: {t.error or 'unknown'}" for i, t in enumerate(trajs)
                              if t.termination == "error"}
    costs: list[CostBreakdown | None] = [None] * n
    latencies = [0.0] * n
    for i, t in enumerate(trajs):
        if i in errors:
            continue
        try:
            costs[i] = episode_cost(t, price_in, price_out)
            latencies[i] = episode_latency(t, count_generation)
        except ValueError as e:
            errors[i] = f"accounting failed: {e}"
    live = [i for i in range(n) if i not in errors]
    judged = await asyncio.gather(*(
        _judge_one(trajs[i], tasks[i], judges, llm=llm, threshold=f1_threshold, math_timeout_s=math_timeout_s)
        for i in live))
    verdicts = dict(zip(live, judged, strict=True))
    for i, v in verdicts.items():
        trajs[i].correct = v.correct
    for i in errors:
        trajs[i].correct = False

    groups: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(trajs):
        groups[t.uid or tasks[i].id].append(i)
    rewards: dict[int, Reward] = {}
    for members in groups.values():
        ok = [i for i in members if i in verdicts]
        judged_members = [Judged(trajs[i], verdicts[i].correct, costs[i].total_usd, latencies[i], tasks[i].pref)
                          for i in ok]
        got = scheme.rewards(judged_members, tasks[members[0]].pref, cost_scale=cost_scale,
                             latency_scale=latency_scale, unanswered_penalty=unanswered_penalty)
        rewards.update(zip(ok, got, strict=True))
    values = [rewards[i].value if i in rewards else float(failure_reward) for i in range(n)]

    advantages = [0.0] * n
    dropped = [False] * n
    members_of = list(groups.values())
    per_group = scheme.advantages([[values[i] for i in members] for members in members_of], min_std, clip,
                                  norm_by_std=norm_adv_by_std)
    for members, (adv, drop) in zip(members_of, per_group, strict=True):
        for i, a in zip(members, adv, strict=True):
            advantages[i], dropped[i] = a, drop

    out: list[Scored] = []
    for i, t in enumerate(trajs):
        if i in errors:
            s = failure_scored(t, t.uid or tasks[i].id, tasks[i].id, failure_reward, errors[i], "error", rubric)
            s.advantage, s.dropped = advantages[i], dropped[i]
        else:
            r = rewards[i]
            s = Scored(traj_id=t.episode_id, uid=t.uid or tasks[i].id, task_id=tasks[i].id, correct=r.correct,
                       reward=r.value, terms=r.terms, advantage=advantages[i], dropped=dropped[i],
                       cost=costs[i].to_dict(), latency_s=latencies[i], judgement=verdicts[i].to_dict(),
                       features=r.features, normalized=r.normalized, termination=t.termination, rubric=rubric,
                       tool_counts=dict(t.tool_counts))
        log.debug("reward %s", s.to_dict())
        out.append(s)
    for uid, members in groups.items():
        log.info("group %s: %d episodes, %d correct, %d errored, rewards %s, advantages %s, dropped %s, "
                 "mean $%.6f", uid, len(members), sum(out[i].correct for i in members),
                 sum(i in errors for i in members), [round(values[i], 4) for i in members],
                 [round(advantages[i], 3) for i in members], dropped[members[0]],
                 sum(out[i].cost["total_usd"] for i in members) / len(members))
    return out


async def score_episode(traj: Trajectory, task: Task, judges: dict[str, str], *, cost_scale: float = 0.01,
                        latency_scale: float = 10.0, price_in: float = 0.0, price_out: float = 0.0
                        ) -> tuple[bool, float, float, float]:
    """(correct, $, seconds, scalar reward under task.pref) of one finished episode. Per-episode pieces of
    reward/ rather than score_group: the scalar rubric needs no group, and score_group's advantage step
    would import verl (seconds) for nothing. An episode that ended in `error` is wrong, at $0, reward 0."""
    if traj.termination == "error":
        return False, 0.0, 0.0, 0.0
    verdict = await _judge_one(traj, task, judges)
    cost = episode_cost(traj, price_in, price_out).total_usd
    latency = episode_latency(traj)
    reward = scalar_reward(verdict.correct, cost, latency, traj.tool_counts, task.pref, cost_scale, latency_scale)
    return verdict.correct, cost, latency, reward.value


def episode_scorer(judges: dict[str, str], *, cost_scale: float = 0.01, latency_scale: float = 10.0,
                   price_in: float = 0.0, price_out: float = 0.0
                   ) -> Callable[[Trajectory, Task], Awaitable[tuple[bool, float, float, float]]]:
    """`score_episode` with the run's judges, scales and the orchestrator's own token prices bound: what evaluation
    and exploration (orchestra/eval/runner.py, orchestra/routing/explore.py) are given, so the core that plays the
    episodes never imports reward/."""
    async def score(traj: Trajectory, task: Task) -> tuple[bool, float, float, float]:
        return await score_episode(traj, task, judges, cost_scale=cost_scale, latency_scale=latency_scale,
                                   price_in=price_in, price_out=price_out)

    return score
