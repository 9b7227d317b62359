"""RewardActor: the group barrier between rollouts and the learner. A plain async class; cluster/ makes it a
Ray actor (`remote_reward_actor` below is the small factory), tests also drive it directly with asyncio.

Rollout workers `await submit(traj_dict, task_dict, group_size)` as each episode finishes. Episodes are
grouped by `uid`; when a group has `group_size` members it is scored (reward/score.py: judges run
concurrently, rubric, advantages) and every waiting caller gets its own `Scored` dict. A group deadline,
counted from its first arrival, scores whatever has arrived, so a lost episode never blocks the others;
members that arrive after that get `failure_reward` with advantage 0 and status "late". Errored members
(termination "error") get `failure_reward` inside their group (reward/score.py). Scoring itself is bounded
by `score_timeout_s`; if it fails, every member gets the failure reward and the reason — callers are always
answered.

A uid names one group of one step (e.g. "s{step}-{i}-{task}"): after a complete group is scored its uid is
free again, but after a deadline the next arrivals with that uid count as the missing, late members.

Concurrency: every waiting `submit` holds one actor slot, so the Ray actor's max_concurrency must exceed the
number of episodes in flight (prompts_per_step × group_size), or the barrier can only open by deadline.

`step_report()` gives the figures since its last call (accuracy, mean $ and its parts, mean latency, tool
mix, groups scored/dropped, deadline fires, late and errored episodes); `state()` / `load_state()` carry the
cumulative counters through checkpoints. Left to others: resources and placement (cluster/), the learner.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from actors import metrics
from orchestra.types import Task, Trajectory
from reward.judges import LLMJudge
from reward.rubric import RUBRICS
from reward.score import Scored, failure_scored, score_group
from tools.tau2 import wiring as _tau2_wiring  # noqa: F401  registers τ² (its judge)

log = logging.getLogger("orchestra.reward")
_COUNTERS = ("episodes", "correct", "cost_usd", "experts_usd", "tools_usd", "orchestrator_usd", "latency_s",
             "reward", "groups_scored", "groups_dropped", "deadline_fires", "missing", "late", "errors")


@dataclass
class _Group:
    uid: str
    size: int
    started: float
    members: list[tuple[Trajectory, Task]] = field(default_factory=list)
    waiters: list[asyncio.Future] = field(default_factory=list)
    timer: asyncio.Task | None = None


def _zero() -> dict[str, Any]:
    return {**{k: 0.0 for k in _COUNTERS}, "tools": Counter()}


class RewardActor:
    def __init__(self, rubric: str = "toolorchestra", judges: dict[str, str] | None = None, min_std: float = 0.1,
                 clip: float = 3.0, cost_scale: float = 0.01, latency_scale: float = 10.0,
                 orchestrator_price_in: float = 0.0, orchestrator_price_out: float = 0.0,
                 count_generation_latency: bool = False, group_deadline_s: float = 300.0,
                 failure_reward: float = 0.0, unanswered_penalty: float = 0.0, norm_adv_by_std: bool = True,
                 judge_base_url: str = "",
                 judge_model: str = "", judge_api_key_env: str = "", judge_timeout_s: float = 60.0,
                 judge_max_concurrency: int = 16,
                 f1_threshold: float = 0.5, math_timeout_s: float = 10.0, score_timeout_s: float = 600.0):
        if rubric not in RUBRICS:
            raise ValueError(f"rubric must be one of {tuple(RUBRICS)}, got {rubric!r}")
        if group_deadline_s <= 0 or score_timeout_s <= 0:
            raise ValueError("group_deadline_s and score_timeout_s must be > 0")
        self.rubric, self.judges = rubric, dict(judges or {"default": "exact"})
        self.group_deadline_s, self.score_timeout_s = group_deadline_s, score_timeout_s
        self.failure_reward = float(failure_reward)
        self.llm = (LLMJudge(judge_base_url, judge_model, judge_api_key_env, judge_timeout_s,
                             max_concurrency=judge_max_concurrency) if judge_base_url and judge_model else None)
        if "llm" in self.judges.values() and self.llm is None:
            raise ValueError("a data source uses the 'llm' judge but no judge_base_url / judge_model is set")
        self.score_kw = dict(rubric=rubric, judges=self.judges, min_std=min_std, clip=clip, cost_scale=cost_scale,
                             latency_scale=latency_scale, price_in=orchestrator_price_in,
                             price_out=orchestrator_price_out, count_generation=count_generation_latency,
                             failure_reward=self.failure_reward, unanswered_penalty=unanswered_penalty,
                             norm_adv_by_std=norm_adv_by_std, llm=self.llm, f1_threshold=f1_threshold,
                             math_timeout_s=math_timeout_s)
        self._groups: dict[str, _Group] = {}
        self._scored: dict[str, list[Scored]] = {}  # uid -> its scored group, since the last step report
        self._late: dict[str, int] = {}  # uid -> members still missing from a group scored by its deadline
        self._tasks: set[asyncio.Task] = set()  # keep scoring/timer tasks referenced until they finish
        self._step, self._total = _zero(), _zero()
        if RUBRICS[rubric].warm_up is not None:  # its imports overlap the warm start, not the first RL step
            threading.Thread(target=RUBRICS[rubric].warm_up, daemon=True, name="rubric-warm-up").start()

    @classmethod
    def from_config(cls, reward_cfg: Any, model_cfg: Any = None, judge_expert: Any = None) -> RewardActor:
        """Build from RewardConfig (+ ModelConfig for the policy's prices, + the ExpertConfig named by
        `reward.judge_expert` for the `llm` judge's endpoint)."""
        return cls(**cls.config_kwargs(reward_cfg, model_cfg, judge_expert))

    @staticmethod
    def config_kwargs(reward_cfg: Any, model_cfg: Any = None, judge_expert: Any = None) -> dict[str, Any]:
        """The constructor's arguments from config: one mapping for every caller (the launcher passes them to
        `.remote`), so a reward setting cannot be honoured by one backend and dropped by another."""
        j = judge_expert
        return dict(rubric=reward_cfg.rubric, judges=dict(reward_cfg.judges), min_std=reward_cfg.min_std,
                    clip=reward_cfg.adv_clip, cost_scale=reward_cfg.cost_scale,
                    latency_scale=reward_cfg.latency_scale,
                    orchestrator_price_in=model_cfg.price_in_per_mtok if model_cfg else 0.0,
                    orchestrator_price_out=model_cfg.price_out_per_mtok if model_cfg else 0.0,
                    count_generation_latency=reward_cfg.count_generation_latency,
                    group_deadline_s=reward_cfg.group_deadline_s, failure_reward=reward_cfg.failure_reward,
                    unanswered_penalty=reward_cfg.unanswered_penalty, norm_adv_by_std=reward_cfg.norm_adv_by_std,
                    judge_base_url=j.base_url if j else "", judge_model=(j.model or "") if j else "",
                    judge_api_key_env=j.api_key_env if j else "", judge_timeout_s=j.timeout_s if j else 60.0)

    # ------------------------------------------------------------ the barrier
    async def submit(self, traj_dict: dict[str, Any], task_dict: dict[str, Any], group_size: int) -> dict[str, Any]:
        """Add one finished episode; return its Scored dict once its group is scored (or its deadline fires)."""
        if not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be a positive int, got {group_size!r}")
        try:
            traj, task = Trajectory.from_dict(traj_dict), Task.from_dict(task_dict)
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"submit: malformed trajectory or task: {e}") from None
        uid = traj.uid or task.id
        if uid not in self._groups and self._late.get(uid, 0) > 0:
            return self._answer_late(traj, uid, task.id)
        group = self._groups.get(uid)
        if group is None:
            group = self._groups[uid] = _Group(uid, group_size, time.monotonic())
            group.timer = self._spawn(self._deadline(group))
        elif group.size != group_size:
            log.warning("group %s: group_size %d differs from the first arrival's %d; keeping %d", uid,
                        group_size, group.size, group.size)
        future = asyncio.get_running_loop().create_future()
        group.members.append((traj, task))
        group.waiters.append(future)
        if len(group.members) >= group.size:
            self._close(group, by_deadline=False)
        return await future

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _deadline(self, group: _Group) -> None:
        await asyncio.sleep(self.group_deadline_s)
        if self._groups.get(group.uid) is group:
            self._step["deadline_fires"] += 1
            self._total["deadline_fires"] += 1
            log.warning("group %s: deadline %.1fs fired with %d/%d members", group.uid, self.group_deadline_s,
                        len(group.members), group.size)
            metrics.record("reward_barrier_total", 1.0, event="deadline_fire")
            self._close(group, by_deadline=True)

    def _close(self, group: _Group, by_deadline: bool) -> None:
        del self._groups[group.uid]
        if not by_deadline and group.timer is not None:
            group.timer.cancel()
        missing = group.size - len(group.members)
        if missing > 0:
            self._late[group.uid] = missing
            while len(self._late) > 10_000:  # bounded: forget the oldest late-arrival slots
                self._late.pop(next(iter(self._late)))
            self._count("missing", missing)
        self._spawn(self._score(group, by_deadline))

    async def _score(self, group: _Group, by_deadline: bool = False) -> None:
        trajs = [t for t, _ in group.members]
        tasks = [k for _, k in group.members]
        try:
            scored = await asyncio.wait_for(score_group(trajs, tasks, **self.score_kw), self.score_timeout_s)
        except Exception as e:  # includes the timeout: answer everyone rather than hang
            reason = f"scoring failed: {type(e).__name__}: {str(e)[:300]}"
            log.error("group %s: %s", group.uid, reason)
            scored = [failure_scored(t, group.uid, k.id, self.failure_reward, reason, "error", self.rubric)
                      for t, k in group.members]
        self._record(scored)
        self._scored[group.uid] = scored  # until the step report: a group played again is counted once (forget)
        while len(self._scored) > 10_000:  # bounded where no step report comes (the verl path): the oldest go
            self._scored.pop(next(iter(self._scored)))
        for future, s in zip(group.waiters, scored, strict=True):
            s.by_deadline = by_deadline  # scored without its missing members (the verl path logs it)
            if not future.done():
                future.set_result(s.to_dict())

    def _answer_late(self, traj: Trajectory, uid: str, task_id: str) -> dict[str, Any]:
        self._late[uid] -= 1
        if self._late[uid] <= 0:
            del self._late[uid]
        self._count("late", 1)
        metrics.record("reward_barrier_total", 1.0, event="late")
        s = failure_scored(traj, uid, task_id, self.failure_reward,
                           "arrived after its group's deadline had fired", "late", self.rubric)
        return s.to_dict()

    # ------------------------------------------------------------ reporting
    def _count(self, key: str, value: float) -> None:
        self._step[key] += value
        self._total[key] += value

    def _record(self, scored: list[Scored], sign: float = 1.0) -> None:
        """Add a scored group to the counters (sign -1: take it back out)."""
        self._count("groups_scored", sign)
        self._count("groups_dropped", sign * float(bool(scored) and all(s.dropped for s in scored)))
        for s in scored:
            self._count("episodes", sign)
            self._count("correct", sign * float(s.correct))
            self._count("errors", sign * float(s.status == "error"))
            self._count("reward", sign * s.reward)
            self._count("latency_s", sign * s.latency_s)
            for part, key in (("total_usd", "cost_usd"), ("experts_usd", "experts_usd"),
                              ("tools_usd", "tools_usd"), ("orchestrator_usd", "orchestrator_usd")):
                self._count(key, sign * s.cost.get(part, 0.0))
            for c in (self._step["tools"], self._total["tools"]):
                if sign > 0:
                    c.update(s.tool_counts)
                else:
                    c.subtract(s.tool_counts)
                    for k in [k for k, v in c.items() if v <= 0]:
                        del c[k]

    async def forget(self, uids: list[str]) -> dict[str, int]:
        """The groups of a rollout worker that died mid-step, about to be played again under the same uids: their
        partial groups are dropped (their waiters were in the dead worker) and groups already scored this step
        are taken back out of the counters, so the replay is counted once. Returns what was forgotten."""
        pending = scored = 0
        for uid in uids:
            group = self._groups.pop(uid, None)
            if group is not None:
                pending += 1
                if group.timer is not None:
                    group.timer.cancel()
                for future in group.waiters:
                    if not future.done():
                        future.cancel()
            self._late.pop(uid, None)
            if uid in self._scored:
                scored += 1
                self._record(self._scored.pop(uid), sign=-1.0)
        return {"pending": pending, "scored": scored}

    @staticmethod
    def _summary(c: dict[str, Any]) -> dict[str, Any]:
        n = c["episodes"]
        tool_turns = sum(c["tools"].values())
        return {"episodes": int(n), "accuracy": c["correct"] / n if n else 0.0,
                "mean_cost_usd": c["cost_usd"] / n if n else 0.0,
                "mean_experts_usd": c["experts_usd"] / n if n else 0.0,
                "mean_tools_usd": c["tools_usd"] / n if n else 0.0,
                "mean_orchestrator_usd": c["orchestrator_usd"] / n if n else 0.0,
                "mean_latency_s": c["latency_s"] / n if n else 0.0, "mean_reward": c["reward"] / n if n else 0.0,
                "tool_mix": {k: v / tool_turns for k, v in sorted(c["tools"].items())} if tool_turns else {},
                "tool_counts": dict(sorted(c["tools"].items())),
                **{k: int(c[k]) for k in ("groups_scored", "groups_dropped", "deadline_fires", "missing", "late",
                                          "errors")}}

    async def step_report(self) -> dict[str, Any]:
        """Figures since the previous call, then reset them; `pending_groups` are groups still filling."""
        out = self._summary(self._step)
        out["pending_groups"] = len(self._groups)
        self._step = _zero()
        self._scored.clear()
        return out

    def state(self) -> dict[str, Any]:
        """Cumulative counters (and those of the unreported step) for a checkpoint."""
        def plain(c):
            return {**{k: c[k] for k in _COUNTERS}, "tools": dict(c["tools"])}
        return {"total": plain(self._total), "step": plain(self._step)}

    def load_state(self, state: dict[str, Any]) -> None:
        """Back to a checkpoint's counters. Whatever is still at the barrier belongs to the abandoned present (the
        step being re-run plays its groups again under the same uids): it is dropped, so nothing joins them."""
        for group in self._groups.values():
            if group.timer is not None:
                group.timer.cancel()
            for future in group.waiters:
                if not future.done():
                    future.cancel()
        self._groups.clear()
        self._late.clear()
        self._scored.clear()
        for key in ("total", "step"):
            src, dst = state.get(key, {}), _zero()
            for k in _COUNTERS:
                dst[k] = float(src.get(k, 0.0))
            dst["tools"] = Counter({str(k): int(v) for k, v in src.get("tools", {}).items()})
            setattr(self, f"_{key}", dst)

    def totals(self) -> dict[str, Any]:
        """Cumulative summary since construction (or the loaded checkpoint)."""
        return self._summary(self._total)

    async def close(self) -> None:
        if self.llm is not None:
            await self.llm.close()


def remote_reward_actor(num_cpus: float = 0.05, max_concurrency: int = 1000, **kwargs: Any):
    """Start a RewardActor as a Ray actor (async; `max_concurrency` must exceed the episodes in flight)."""
    import ray

    return ray.remote(RewardActor).options(num_cpus=num_cpus, max_concurrency=max_concurrency).remote(**kwargs)
