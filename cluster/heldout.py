"""Held-out evaluation during training: what the run's `heldout_reward_gain` is measured on.

Every held-out task is played `eval.seeds` times, unscored by the reward actor and at the evaluation temperature,
then scored here with the `scalar` rubric under the evaluation preference (absolute, not group-relative:
orchestra/rundir/records.score_kwargs). Each episode's seed depends on (task, k) only, not on the evaluation's
tag, so the evaluations before and after RL draw the same random numbers (common random numbers: less noise
in the gain they measure). When to evaluate is cluster/trainer.py's business.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from statistics import mean
from typing import Any

from actors.rollout_worker import EpisodeResult
from orchestra.rundir.records import episode_seed, score_kwargs
from orchestra.types import Task
from reward.score import Scored, score_group


def requests(tasks: list[Task], seed: int, seeds: int, tag: str) -> list[dict[str, Any]]:
    """One request per (k, task), a group of one each, seeded by (run seed, task, k)."""
    return [{"task": t.to_dict(), "uid": f"eval-{tag}-{t.id}-{k}", "group_size": 1,
             "seed": episode_seed(seed, "eval", t.id, k), "episode_id": f"eval-{tag}-{t.id}-{k}"}
            for k in range(seeds) for t in tasks]


def score(results: list[EpisodeResult], tasks: list[Task], cfg: Any) -> list[Scored]:
    """The held-out score of each episode (the scalar rubric, no training-only terms)."""
    by_id = {t.id: t for t in tasks}
    trajs = [r.traj for r in results]
    return asyncio.run(score_group(trajs, [by_id[t.task_id] for t in trajs], **score_kwargs(cfg, "eval")))


def summary(results: list[EpisodeResult], scored: list[Scored], tasks: list[Task]) -> dict[str, Any]:
    """Means over the episodes (score, accuracy, $, seconds, format, answered, tool mix) and per task family,
    where the routing improved."""
    by_id = {t.id: t for t in tasks}
    trajs = [r.traj for r in results]
    mix = Counter(k for s in scored for k, v in s.tool_counts.items() for _ in range(v))
    families: dict[str, list[Scored]] = {}
    for s, tr in zip(scored, trajs, strict=True):
        families.setdefault(str(by_id[tr.task_id].meta.get("family", "all")), []).append(s)
    return {"score": mean(s.reward for s in scored), "accuracy": mean(float(s.correct) for s in scored),
            "by_family": {f: {"score": mean(s.reward for s in v), "accuracy": mean(float(s.correct) for s in v),
                              "cost_usd": mean(s.cost_usd for s in v), "episodes": len(v)}
                          for f, v in sorted(families.items())},
            "cost_usd": mean(s.cost_usd for s in scored), "latency_s": mean(s.latency_s for s in scored),
            "format_ok": mean(float(all(t.format_ok for t in tr.turns)) for tr in trajs),
            "answered": mean(float(tr.termination == "answered") for tr in trajs),
            "tool_mix": {k: v / len(scored) for k, v in sorted(mix.items())}, "episodes": len(scored)}
