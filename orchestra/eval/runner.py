"""The evaluation runner: (policy, preference, seed, task) episodes played concurrently, scored, and appended to a
results file as they finish.

The orchestrator (a checkpoint) and the untrained base policy are real engines, given by the caller; baselines
are scripted (orchestra/eval/baselines.py). Seeds: seed k rebuilds the tools with zoo.seed + k (sim experts draw
from it) and sets Sampling.seed. Scoring is the caller's `score(traj, task) -> (correct, $, seconds, reward)`:
reward/score.py `episode_scorer` (judges, cost accounting and the per-episode `scalar` rubric under the episode's
preference; an episode that ended in `error` counts as wrong, at $0, with reward 0), so the core imports no reward/. Each finished
episode is appended to a JSONL file at once; a restart skips keys already there (resumable).
Statistics and the report are orchestra/eval/stats.py and report.py; loading checkpoints, building tools and
writing files is cluster/evaluate.py's job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.agent.scripted import script_engine
from orchestra.engine import Engine, Sampling
from orchestra.eval.baselines import baseline_script
from orchestra.jsonl import JsonlWriter, read_jsonl
from orchestra.types import Task, Trajectory


def task_seed(seed: int, task_id: str) -> int:
    """A stable 31-bit sampling seed per (evaluation seed, task); not Python's salted hash()."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}".encode()).digest()[:4], "big") >> 1


def episode_key(policy: str, preference: str, seed: int, task_id: str) -> str:
    return f"{policy}|{preference}|{seed}|{task_id}"


def load_done(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """Records already in a results JSONL (a torn last line from a crash is ignored)."""
    done: dict[str, dict[str, Any]] = {}
    if path and Path(path).is_file():
        for r in read_jsonl(path, skip_bad=True):
            done[episode_key(r["policy"], r["preference"], r["seed"], r["task_id"])] = r
    return done


# (trajectory, task) -> (correct, $, seconds, reward): reward/score.py episode_scorer
Scorer = Callable[[Trajectory, Task], Awaitable[tuple[bool, float, float, float]]]


class Evaluator:
    """Runs (policy, preference, seed, task) episodes concurrently and scores them.

    tool_clients: seed -> ToolClient (a LocalToolClient over build_tools, or Ray tool-server clients).
    engines: policy name -> Engine shared by all its episodes (orchestrator, base); baselines need none.
    scripts: policy name -> fixed tool-call texts played on every task (e.g. one plan of a family router).
    routers: policy name -> task -> tool-call texts, chosen per task under its preference (the estimator router,
    orchestra/routing/router.py)."""

    def __init__(self, tokenizer: Any, prompter: Prompter, tool_clients: dict[int, Any], eos_token_id: int, *,
                 engines: dict[str, Engine] | None = None, tier_cost: dict[str, float] | None = None,
                 experts: dict[str, Any] | None = None, agent_kwargs: dict[str, Any] | None = None,
                 score: Scorer, sampling: Sampling | None = None, concurrency: int = 16,
                 results_path: str | Path | None = None, scripts: dict[str, list[str]] | None = None,
                 routers: dict[str, Callable[[Task], list[str]]] | None = None):
        self.tok, self.prompter, self.tool_clients, self.eos = tokenizer, prompter, tool_clients, eos_token_id
        self.engines, self.scripts, self.routers = dict(engines or {}), dict(scripts or {}), dict(routers or {})
        self.tier_cost, self.experts = dict(tier_cost or {}), experts
        self.agent_kwargs = dict(agent_kwargs or {})
        self.sampling = sampling or Sampling(temperature=0.0)
        self.score = score
        self.concurrency = concurrency
        self.results_path = Path(results_path) if results_path else None

    def _engine(self, policy: str, task: Task, seed: int) -> Engine:
        if policy in self.engines:
            return self.engines[policy]
        if policy in self.scripts:
            return script_engine(self.tok, self.scripts[policy], self.eos)
        if policy in self.routers:
            return script_engine(self.tok, self.routers[policy](task), self.eos)
        schemas = self.tool_clients[seed].schemas(task)
        script = baseline_script(policy, task, schemas, self.tier_cost, seed, self.experts)
        return script_engine(self.tok, script, self.eos)

    async def _episode(self, policy: str, pref_name: str, pref: dict[str, float] | None, seed: int,
                       task: Task) -> dict[str, Any]:
        if pref is not None:
            task = Task.from_dict({**task.to_dict(), "pref": dict(pref)})
        loop = AgentLoop(self._engine(policy, task, seed), self.tool_clients[seed], self.prompter,
                         **self.agent_kwargs)
        # one stream per (seed, task): a single seed for every task would give every episode the same random
        # numbers, i.e. one quantile of the policy rather than samples of it (policies share it: paired runs)
        sampling = Sampling(**{**self.sampling.__dict__, "seed": task_seed(seed, task.id)})
        traj: Trajectory = await loop.run(task, sampling, uid=f"{policy}-{pref_name}-{seed}-{task.id}")
        correct, cost, latency, reward = await self.score(traj, task)
        return {"policy": policy, "preference": pref_name, "seed": seed, "task_id": task.id,
                "data_source": task.data_source, "family": task.meta.get("family"), "correct": bool(correct),
                "reward": float(reward), "cost_usd": float(cost), "latency_s": float(latency),
                "tool_counts": dict(traj.tool_counts), "termination": traj.termination, "answer": traj.answer,
                "turns": len(traj.turns), "error": traj.error}

    async def run(self, tasks: list[Task], policies: list[str], preferences: dict[str, dict[str, float] | None],
                  seeds: list[int], pref_policies: tuple[str, ...] | None = None,
                  on_episode: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """All episodes; policies in `pref_policies` (default: the orchestrator and the routers) run under every
        preference, the others under the first one only (a fixed router ignores P, so its other rows would repeat
        it). Returns all records."""
        if pref_policies is None:
            pref_policies = ("orchestrator", *self.routers)
        done = load_done(self.results_path)
        first = next(iter(preferences))
        jobs = [(p, name, pref, s, t) for p in policies
                for name, pref in (preferences.items() if p in pref_policies else [(first, preferences[first])])
                for s in seeds for t in tasks]
        todo = [j for j in jobs if episode_key(j[0], j[1], j[3], j[4].id) not in done]
        sem = asyncio.Semaphore(self.concurrency)
        if self.results_path:
            self.results_path.parent.mkdir(parents=True, exist_ok=True)
        sink = JsonlWriter(self.results_path, append=True, default=str) if self.results_path else None
        out = [done[episode_key(j[0], j[1], j[3], j[4].id)] for j in jobs
               if episode_key(j[0], j[1], j[3], j[4].id) in done]

        async def one(job):
            async with sem:
                rec = await self._episode(*job)
            if sink is not None:
                sink.write(rec)  # a whole line, flushed: a crash loses at most the line being written
            if on_episode is not None:
                on_episode(rec)
            return rec

        try:
            out += await asyncio.gather(*(one(j) for j in todo))
        finally:
            if sink is not None:
                sink.close()
        return out
