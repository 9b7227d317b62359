"""Evaluation: run the orchestrator and fixed-router baselines over a task set; report accuracy, cost, latency.

Every policy runs through the SAME AgentLoop, tools and accounting: baselines are scripted engines
(orchestra.engine.scripted) that emit fixed tool calls. Baselines:
  strongest  `answer` with the tier whose expert costs most per nominal call (1k tokens in, its typical out)
  cheapest   `answer` with the tier that costs least
  random     `answer` with a uniformly random tier (seeded per task and seed)
  heuristic  family keywords -> tiers (`HEURISTIC_RULES`, written for the template families; a rule whose
             tier the task lacks is skipped; the fallback is the median-cost answer tier)
  oracle     replay zoos only: the cheapest tier whose replayed model was recorded right (else the cheapest)
The orchestrator (a checkpoint) and the untrained base policy are real engines, given by the caller.
Seeds: seed k rebuilds the tools with zoo.seed + k (sim experts draw from it) and sets Sampling.seed.
Scoring: reward/ judges, cost accounting and the per-episode `scalar` rubric under the episode's preference;
an episode that ended in `error` counts as wrong, at $0, with reward 0.
Each finished episode is appended to a JSONL file at once; a restart skips keys already there (resumable).
`summarize` gives means with 95% CIs (normal approximation: 1.96 * sample std / sqrt(n); 0 when n < 2).
Loading checkpoints, building tools and writing files is cluster/evaluate.py's job; plots are orchestra.eval.plots.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.engine import Engine, Sampling
from orchestra.engine.scripted import call_text, script_engine, tiers_of
from orchestra.types import Task, Trajectory

BASELINES = ("strongest", "cheapest", "random", "heuristic", "oracle")
# The frontier the orchestrator is judged against: routers that do not look at the answers (the oracle does;
# it is an upper reference point, not a router anyone could deploy).
FIXED_ROUTERS = ("strongest", "cheapest", "random", "heuristic")
# (regex on the problem, calls as (tool, tier)); the last call must be `answer`.
HEURISTIC_RULES: list[tuple[str, list[tuple[str, str]]]] = [
    (r"^Puzzle:", [("answer", "answer-1")]),
    (r"^Code:", [("answer", "answer-2")]),
    (r" boxes of |How many", [("answer", "answer-math-2")]),
    (r"^(Who|Where|Which|In which|In what)\b", [("search", "search-3"), ("answer", "answer-3")]),
]


# ---------------------------------------------------------------- statistics
def mean_ci(values: list[float], z: float = 1.96) -> tuple[float, float]:
    """(mean, half-width of the 95% normal-approximation interval); half-width 0 for fewer than 2 values."""
    n = len(values)
    if n == 0:
        return float("nan"), 0.0
    m = sum(values) / n
    if n < 2:
        return m, 0.0
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, z * math.sqrt(var / n)


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (policy, preference): n, accuracy, cost (cents), latency (s), score, each with its CI;
    tool_mix = share of tool calls per tool id; answered = share of episodes that gave an answer."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["policy"], r["preference"]), []).append(r)
    rows = []
    for (policy, pref), rs in groups.items():
        row: dict[str, Any] = {"policy": policy, "preference": pref, "n": len(rs),
                               "seeds": sorted({r["seed"] for r in rs})}
        for key, values in (("accuracy", [float(r["correct"]) for r in rs]),
                            ("cost_cents", [100.0 * r["cost_usd"] for r in rs]),
                            ("latency_s", [r["latency_s"] for r in rs]), ("score", [r["reward"] for r in rs])):
            row[key], row[f"{key}_ci"] = mean_ci(values)
        calls = Counter()
        for r in rs:
            calls.update(r["tool_counts"])
        total = sum(calls.values())
        row["tool_mix"] = {k: v / total for k, v in sorted(calls.items())} if total else {}
        row["answered"] = sum(r["termination"] == "answered" for r in rs) / len(rs)
        rows.append(row)
    return rows


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Non-dominated (cost, accuracy) points sorted by cost: each is more accurate than every cheaper one."""
    out: list[tuple[float, float]] = []
    for cost, acc in sorted(points, key=lambda p: (p[0], -p[1])):
        if not out or acc > out[-1][1]:
            out.append((cost, acc))
    return out


def on_frontier(point: tuple[float, float], baselines: list[tuple[float, float]], tol: float = 1e-9) -> bool:
    """Is `point` on or above the fixed routers' frontier? The frontier is linear between its points (a random
    mix of two routers reaches any point between them), flat after the last, and below the cheapest router
    linear from (0, 0): mixing that router with "answer nothing" (free, never right) reaches those points."""
    front = frontier(baselines)
    cost, acc = point
    if not front:
        return True
    if cost < front[0][0]:
        return acc >= front[0][1] * cost / front[0][0] - tol
    best = front[-1][1]
    for (c0, a0), (c1, a1) in zip(front, front[1:], strict=False):
        if c0 <= cost <= c1:
            best = a0 + (a1 - a0) * ((cost - c0) / (c1 - c0) if c1 > c0 else 1.0)
            break
    return acc >= best - tol


# ---------------------------------------------------------------- baselines as scripts
def tier_costs(zoo: Any, tiers: dict[str, str]) -> dict[str, float]:
    """$ of one nominal call per tier (1000 tokens in, the expert's typical output), for ranking tiers."""
    from tools.registry import build_experts

    experts = build_experts(zoo)
    out = {}
    for tier, name in tiers.items():
        e = experts.get(name)
        if e is not None:
            out[tier] = float(e.cost(1000, int(getattr(e, "tokens_out", 500) or 500)))
    return out


def _answer_tiers(schemas: list[dict[str, Any]]) -> list[str]:
    for s in schemas:
        if s.get("function", s).get("name") == "answer":
            return tiers_of(s)
    return []


def oracle_tier(task: Task, tiers: list[str], costs: dict[str, float], experts: dict[str, Any]) -> str:
    """Cheapest tier whose replayed model was recorded right on this question (replay experts only)."""
    qid = str(task.meta.get("question_id", task.id))
    ranked = sorted(tiers, key=lambda t: costs.get(t, math.inf))
    for tier in ranked:
        e = experts.get(task.model_mapping.get(tier, ""))
        records = e.records() if hasattr(e, "records") else None
        if records is None:
            raise ValueError("the oracle baseline needs replay experts (recorded outcomes); this zoo has none")
        rec = records.get(qid)
        if rec is not None and rec.correct:
            return tier
    return ranked[0]


def baseline_script(name: str, task: Task, schemas: list[dict[str, Any]], costs: dict[str, float], seed: int,
                    experts: dict[str, Any] | None = None) -> list[str]:
    """The tool-call texts baseline `name` emits for `task`, one per turn."""
    tiers = _answer_tiers(schemas)
    if not tiers:
        raise ValueError(f"task {task.id}: no `answer` tool with tiers among {[s.get('function', s).get('name') for s in schemas]}")
    ranked = sorted(tiers, key=lambda t: (costs.get(t, math.inf), t))
    if name == "strongest":
        return [call_text("answer", {"model": ranked[-1]})]
    if name == "cheapest":
        return [call_text("answer", {"model": ranked[0]})]
    if name == "random":
        return [call_text("answer", {"model": random.Random(f"{seed}:{task.id}").choice(tiers)})]
    if name == "oracle":
        return [call_text("answer", {"model": oracle_tier(task, tiers, costs, experts or {})})]
    if name == "heuristic":
        offered = {s.get("function", s).get("name"): set(tiers_of(s)) for s in schemas}
        for pattern, calls in HEURISTIC_RULES:
            if re.search(pattern, task.problem) and all(tier in offered.get(tool, ()) for tool, tier in calls):
                return [call_text(tool, {"model": tier}) for tool, tier in calls]
        return [call_text("answer", {"model": ranked[len(ranked) // 2]})]
    raise ValueError(f"unknown baseline {name!r}; choose one of {BASELINES}")


# ---------------------------------------------------------------- running
def episode_seed(seed: int, task_id: str) -> int:
    """A stable 31-bit sampling seed per (evaluation seed, task); not Python's salted hash()."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"{seed}:{task_id}".encode()).digest()[:4], "big") >> 1


def episode_key(policy: str, preference: str, seed: int, task_id: str) -> str:
    return f"{policy}|{preference}|{seed}|{task_id}"


def load_done(path: str | Path | None) -> dict[str, dict[str, Any]]:
    """Records already in a results JSONL (a torn last line from a crash is ignored)."""
    done: dict[str, dict[str, Any]] = {}
    if path and Path(path).is_file():
        for line in Path(path).read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[episode_key(r["policy"], r["preference"], r["seed"], r["task_id"])] = r
    return done


class Evaluator:
    """Runs (policy, preference, seed, task) episodes concurrently and scores them.

    tool_clients: seed -> ToolClient (a LocalToolClient over build_tools, or Ray tool-server clients).
    engines: policy name -> Engine shared by all its episodes (orchestrator, base); baselines need none.
    scripts: policy name -> fixed tool-call texts played on every task (e.g. one plan of a family router)."""

    def __init__(self, tokenizer: Any, prompter: Prompter, tool_clients: dict[int, Any], eos_token_id: int, *,
                 engines: dict[str, Engine] | None = None, tier_cost: dict[str, float] | None = None,
                 experts: dict[str, Any] | None = None, agent_kwargs: dict[str, Any] | None = None,
                 sampling: Sampling | None = None, judges: dict[str, str] | None = None, cost_scale: float = 0.01,
                 latency_scale: float = 10.0, price_in: float = 0.0, price_out: float = 0.0, concurrency: int = 16,
                 results_path: str | Path | None = None, scripts: dict[str, list[str]] | None = None):
        self.tok, self.prompter, self.tool_clients, self.eos = tokenizer, prompter, tool_clients, eos_token_id
        self.engines, self.scripts = dict(engines or {}), dict(scripts or {})
        self.tier_cost, self.experts = dict(tier_cost or {}), experts
        self.agent_kwargs = dict(agent_kwargs or {})
        self.sampling = sampling or Sampling(temperature=0.0)
        self.judges = dict(judges or {"default": "exact"})
        self.cost_scale, self.latency_scale = cost_scale, latency_scale
        self.price_in, self.price_out = price_in, price_out  # the orchestrator's own tokens, $/Mtok
        self.concurrency = concurrency
        self.results_path = Path(results_path) if results_path else None

    def _engine(self, policy: str, task: Task, seed: int) -> Engine:
        if policy in self.engines:
            return self.engines[policy]
        if policy in self.scripts:
            return script_engine(self.tok, self.scripts[policy], self.eos)
        schemas = self.tool_clients[seed].schemas(task)
        script = baseline_script(policy, task, schemas, self.tier_cost, seed, self.experts)
        return script_engine(self.tok, script, self.eos)

    async def _episode(self, policy: str, pref_name: str, pref: dict[str, float] | None, seed: int,
                       task: Task) -> dict[str, Any]:
        from reward.score import score_episode  # reward/ loads judges (math-verify) on import: only when run

        if pref is not None:
            task = Task.from_dict({**task.to_dict(), "pref": dict(pref)})
        loop = AgentLoop(self._engine(policy, task, seed), self.tool_clients[seed], self.prompter,
                         **self.agent_kwargs)
        # one stream per (seed, task): a single seed for every task would give every episode the same random
        # numbers, i.e. one quantile of the policy rather than samples of it (policies share it: paired runs)
        sampling = Sampling(**{**self.sampling.__dict__, "seed": episode_seed(seed, task.id)})
        traj: Trajectory = await loop.run(task, sampling, uid=f"{policy}-{pref_name}-{seed}-{task.id}")
        correct, cost, latency, reward = await score_episode(
            traj, task, self.judges, cost_scale=self.cost_scale, latency_scale=self.latency_scale,
            price_in=self.price_in, price_out=self.price_out)
        return {"policy": policy, "preference": pref_name, "seed": seed, "task_id": task.id,
                "data_source": task.data_source, "family": task.meta.get("family"), "correct": bool(correct),
                "reward": float(reward), "cost_usd": float(cost), "latency_s": float(latency),
                "tool_counts": dict(traj.tool_counts), "termination": traj.termination, "answer": traj.answer,
                "turns": len(traj.turns), "error": traj.error}

    async def run(self, tasks: list[Task], policies: list[str], preferences: dict[str, dict[str, float] | None],
                  seeds: list[int], pref_policies: tuple[str, ...] = ("orchestrator",),
                  on_episode: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
        """All episodes; policies in `pref_policies` run under every preference, the others under the first
        one only (a fixed router ignores P, so its other rows would repeat it). Returns all records."""
        done = load_done(self.results_path)
        first = next(iter(preferences))
        jobs = [(p, name, pref, s, t) for p in policies
                for name, pref in (preferences.items() if p in pref_policies else [(first, preferences[first])])
                for s in seeds for t in tasks]
        todo = [j for j in jobs if episode_key(j[0], j[1], j[3], j[4].id) not in done]
        sem = asyncio.Semaphore(self.concurrency)
        if self.results_path:
            self.results_path.parent.mkdir(parents=True, exist_ok=True)
        sink = self.results_path.open("a") if self.results_path else None
        out = [done[episode_key(j[0], j[1], j[3], j[4].id)] for j in jobs
               if episode_key(j[0], j[1], j[3], j[4].id) in done]

        async def one(job):
            async with sem:
                rec = await self._episode(*job)
            if sink is not None:
                sink.write(json.dumps(rec, default=str) + "\n")
                sink.flush()
            if on_episode is not None:
                on_episode(rec)
            return rec

        try:
            out += await asyncio.gather(*(one(j) for j in todo))
        finally:
            if sink is not None:
                sink.close()
        return out


# ---------------------------------------------------------------- report
def quality_figures(rows: list[dict[str, Any]], orchestrator: str = "orchestrator",
                    preference: str = "balanced") -> dict[str, float]:
    """The `quality_*` figures (DESIGN.md "Benchmarks") from summary rows. Degenerate policies do not pass:
    on_frontier also needs accuracy > 0 (never answering is free, and so trivially "on" the frontier), and
    monotone needs $ falling strictly along accuracy-first, balanced, cost-first; pref_spread is the ratio of
    the ends (accuracy-first $ / cost-first $)."""
    by = {(r["policy"], r["preference"]): r for r in rows}
    base = [r for r in rows if r["policy"] in BASELINES]
    orch = by.get((orchestrator, preference)) or next(r for r in rows if r["policy"] == orchestrator)
    strong = next((r for r in base if r["policy"] == "strongest"), None)
    out: dict[str, float] = {}
    if strong is not None:
        out["acc_gap"] = 100.0 * (strong["accuracy"] - orch["accuracy"])
        out["cost_ratio"] = orch["cost_cents"] / strong["cost_cents"] if strong["cost_cents"] > 0 else math.inf
    fixed = [(r["cost_cents"], r["accuracy"]) for r in base if r["policy"] in FIXED_ROUTERS]
    out["on_frontier"] = float(orch["accuracy"] > 0 and on_frontier((orch["cost_cents"], orch["accuracy"]), fixed))
    costs = [by[(orchestrator, p)]["cost_cents"] for p in ("accuracy-first", "balanced", "cost-first")
             if (orchestrator, p) in by]
    if len(costs) == 3:
        out["monotone"] = float(costs[0] > costs[1] > costs[2])
        # how far apart the presets' $ are: accuracy-first $ / cost-first $ (goal >= 3)
        out["pref_spread"] = costs[0] / costs[2] if costs[2] > 0 else (math.inf if costs[0] > 0 else 0.0)
    return out


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| policy | preference | n | accuracy | cost (¢) | latency (s) | score | top tools |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        mix = ", ".join(f"{k} {v:.0%}" for k, v in sorted(r["tool_mix"].items(), key=lambda kv: -kv[1])[:3])
        lines.append(f"| {r['policy']} | {r['preference']} | {r['n']} | {r['accuracy']:.3f} ± {r['accuracy_ci']:.3f} "
                     f"| {r['cost_cents']:.3f} ± {r['cost_cents_ci']:.3f} | {r['latency_s']:.2f} ± {r['latency_s_ci']:.2f} "
                     f"| {r['score']:.3f} ± {r['score_ci']:.3f} | {mix} |")
    return "\n".join(lines) + "\n"


def write_report(records: list[dict[str, Any]], out_dir: str | Path, meta: dict[str, Any] | None = None,
                 plots: bool = True) -> dict[str, Any]:
    """report.json (meta incl. seeds, rows, quality figures), report.md, and PNG plots; returns the report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = summarize(records)
    report: dict[str, Any] = {"meta": dict(meta or {}), "rows": rows}
    if any(r["policy"] == "orchestrator" for r in rows) and any(r["policy"] in BASELINES for r in rows):
        report["quality"] = quality_figures(rows)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "report.md").write_text(markdown_table(rows))
    if plots:
        from orchestra.eval.plots import plot_pareto, plot_tool_mix

        report["plots"] = [str(plot_pareto(rows, out / "pareto.png")), str(plot_tool_mix(rows, out / "tool_mix.png"))]
    return report
