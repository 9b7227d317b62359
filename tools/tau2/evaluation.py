"""The hook cluster/tau2_eval.py runs for `dataset=tau2:<domain>[:<version>[:<tasks.json>]]`: pass^k with $ and latency.

τ²-bench's numbers must mean the same here: a trial passes when the official reward is 1.0; pass^k is
τ-bench's unbiased estimator, the mean over tasks of C(c, k) / C(n, k) for c passing trials out of n
(pass^1 is the mean success rate). Cost is what the orchestrator's tools and experts charged (the user
simulator's cost is the benchmark's, reported apart); latency is tool service time per episode.

`run_tau2_eval(make_driver, tasks, trials, sampling)` runs every (task, trial) episode with bounded
concurrency (each trial its own episode id, so its own environment) and returns one record per episode;
`summarize_tau2(records, ks)` reduces them. `driver_factory(domain, engine_for, prompter, user, experts=,
tiers=)` builds `make_driver`; the caller brings the engine, the prompter, the zoo's experts and the user
(tools.tau2.user.UserSimulatorPool, or actors/user_simulator.RayUserClient); tools/tau2/domain.domain_tasks
(with parse_dataset's kwargs) gives the tasks. How τ² joins training is tools/tau2/wiring.py.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from math import comb
from statistics import mean
from typing import Any

from orchestra.engine import Sampling
from orchestra.types import Task


def parse_dataset(spec: str) -> dict[str, Any]:
    """'tau2:airline' | 'tau2:airline:v0.2.0' | 'tau2:airline:current:/path/tasks.json' -> domain_tasks kwargs."""
    parts = spec.split(":", 3)
    if parts[0] != "tau2" or len(parts) < 2 or not parts[1]:
        raise ValueError(f"τ² dataset spec must look like tau2:<domain>[:<version>[:<path>]], got {spec!r}")
    out: dict[str, Any] = {"domain": parts[1], "version": parts[2] if len(parts) > 2 and parts[2] else "v0.2.0"}
    if len(parts) > 3 and parts[3]:
        out["path"] = parts[3]
    return out


def driver_factory(domain: str, engine_for: Any, prompter: Any, user: Any, *, experts: dict[str, Any] | None = None,
                   tiers: dict[str, str] | None = None, **driver_kw: Any) -> Any:
    """`make_driver` for run_tau2_eval: a driver per episode (Tau2EpisodeDriver.for_domain: the domain is built
    once per process; its own tools and sessions keep trials apart); `engine_for(trial)` gives the engine (seeded
    per trial). `driver_kw` are Tau2EpisodeDriver's (max_turns, eos_token_ids, budget_usd, nl_judge, ...)."""
    from tools.tau2.episode import Tau2EpisodeDriver

    return lambda trial: Tau2EpisodeDriver.for_domain(domain, engine_for(trial), prompter, user, experts=experts,
                                                      tiers=tiers, **driver_kw)


def pass_hat_k(successes: dict[str, list[bool]], k: int) -> float | None:
    """τ-bench's pass^k over tasks with at least k trials; None when no task has k trials."""
    vals = [comb(sum(s), k) / comb(len(s), k) for s in successes.values() if len(s) >= k]
    return mean(vals) if vals else None


async def run_tau2_eval(make_driver: Any, tasks: list[Task], trials: int = 1, sampling: Sampling | None = None,
                        concurrency: int = 4, policy: str = "orchestrator") -> list[dict[str, Any]]:
    sampling = sampling or Sampling(max_tokens=512, temperature=0.0)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(task: Task, trial: int) -> dict[str, Any]:
        async with gate:
            driver = make_driver(trial)
            seeded = Sampling(**{**sampling.__dict__, "seed": trial if sampling.seed is None else sampling.seed + trial})
            traj = await driver.run(task, seeded, uid=task.id, episode_id=f"{task.id}#{trial}")
        score = traj.meta.get("tau2_score") or {}
        return {"policy": policy, "task_id": task.id, "tau2_task_id": task.meta.get("tau2_task_id"), "trial": trial,
                "reward": float(score.get("score", 0.0)), "correct": bool(traj.correct),
                "cost_usd": traj.cost_usd, "latency_s": traj.latency_s, "gen_latency_s": traj.gen_latency_s,
                "user_cost_usd": float(traj.meta.get("user_cost_usd", 0.0)), "turns": len(traj.turns),
                "termination": traj.meta.get("tau2_termination", traj.termination), "tool_counts": traj.tool_counts,
                "error": traj.error or score.get("error")}

    return list(await asyncio.gather(*(one(t, i) for t in tasks for i in range(trials))))


def summarize_tau2(records: list[dict[str, Any]], ks: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        by_task[r["task_id"]].append(bool(r["correct"]))
    out: dict[str, Any] = {"tasks": len(by_task), "episodes": len(records)}
    for k in ks:
        value = pass_hat_k(by_task, k)
        if value is not None:
            out[f"pass^{k}"] = value
    if records:
        out.update(mean_reward=mean(r["reward"] for r in records), mean_cost_usd=mean(r["cost_usd"] for r in records),
                   mean_latency_s=mean(r["latency_s"] for r in records),
                   mean_user_cost_usd=mean(r["user_cost_usd"] for r in records),
                   terminations=dict(sorted(_count(r["termination"] for r in records).items())))
    return out


def _count(items: Any) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for x in items:
        counts[str(x)] += 1
    return counts
