"""SFT's check of the policy while it trains (sft.until_agreement with route hints, sft.until_follows): greedy
episodes on training tasks, judged by the verdict's own rule (orchestra/eval/verdict.py) against what the run's
estimator router does on the same tasks, so that SFT is never asked for a fall of $ its own teacher does not make.
With `sft.check_falls: estimate` (cpu_tiny) a fall passes only where its estimate reaches its goal, not its interval:
the check decides whether to train on, and a start that reaches its goal only by its interval is a coin toss held-out.

Training tasks, never held-out ones: the decision to go on training must not read the tasks the run is scored on.
The check plays the first `eval.n_tasks` training tasks under each eval preset and, for `follows`, along a cost
ladder (orchestra/preferences.CHECK_COSTS: one weight in each bin of the adherence sweep, none of its weights, none
of its renderings); the router plays the same tasks and vectors once (`RouterOnTasks`, cached: it is fitted before
the first check and never changes). When SFT stops is cluster/warm_start.sft_loop's business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from statistics import mean
from typing import Any

from actors.rollout_worker import EpisodeResult
from cluster.heldout import hint_agreement, preset_of, presets, requests, router_costs, router_records
from orchestra.eval.adherence import PREFIX, sweep_points, task_costs
from orchestra.eval.adherence import adherence as adherence_of
from orchestra.eval.verdict import Goals, goals_of, ladder_curve, preset_curve, problems
from orchestra.preferences import CHECK_COSTS, preset, sweep_vectors
from orchestra.types import Preference, Task

Router = Callable[[dict[str, Preference]], "dict[str, float] | None"]


class RouterOnTasks:
    """The run's estimator router played on `tasks` under named vectors, mean $ per name; each name played once
    (cached). None where the run has no router (its teacher fitted none): the check then asks a strict fall."""

    def __init__(self, cfg: Any, run_dir: Path, tasks: list[Task], tools: Any, tokenizer: Any):
        self.args = (cfg, run_dir, tasks, tools, tokenizer)
        self.costs: dict[str, float] = {}
        self.absent = False

    def __call__(self, vectors: dict[str, Preference]) -> dict[str, float] | None:
        todo = {k: v for k, v in vectors.items() if k not in self.costs}
        if todo and not self.absent:
            records = router_records(*self.args, todo)
            if records is None:
                self.absent = True
            else:
                self.costs.update(router_costs(records))
        return None if self.absent else {k: self.costs.get(k, float("nan")) for k in vectors}


def train_check(cfg: Any, train: list[Task], step: int, rollout: Callable[..., list[EpisodeResult]], bars: Any,
                sync: Callable[[], Any], what: list[str], goals: Goals, router: Router | None = None
                ) -> dict[str, Any]:
    """SFT's check (cluster/warm_start.sft_loop): the learner's weights to the workers (`sync`), then greedy episodes
    on (up to eval.n_tasks) training tasks under each eval preset (`rollout(requests, eval_mode=True, bar=...)`, the
    trainer's). `what` (warm_start.sft_checks): `hints`, every preset's share calling its hint's plan reaches
    sft.until_agreement; `follows`, the verdict's rule on the training tasks: over the presets and along the cost
    ladder each step's fall of $ is at least `goals.share` of `router`'s over the same tasks, and accuracy-first
    spends `goals.min_spread` x cost-first where the router does. -> {passed, line, below, judged, hint_<preset>...,
    pref_spread, monotone, ladder_adherence, ladder, router_ladder}."""
    sync()
    prefs, tasks = presets(cfg), train[: cfg.eval.n_tasks]
    reqs = requests(tasks, cfg.seed, 1, f"sft{step}", prefs)
    ladder = sweep_vectors(CHECK_COSTS) if "follows" in what else {}
    reqs_ladder = requests(tasks, cfg.seed, 1, f"sft{step}", list(ladder), ladder) if ladder else []
    bar = bars.add(f"SFT check {step}", len(reqs) + len(reqs_ladder))
    results = rollout(reqs + reqs_ladder, eval_mode=True, bar=bar)
    bars.remove(bar)
    results, on_ladder = results[: len(reqs)], results[len(reqs):]
    out: dict[str, Any] = {"passed": True}
    lines, below = [], []
    if "hints" in what:
        found = hint_agreement(results, reqs, prefs)
        shares = found.get("hint_agreement_by_pref") or {"all": found.get("hint_agreement", 0.0)}
        goal = cfg.sft.until_agreement
        out.update({f"hint_{k}": v for k, v in shares.items()})
        lines.append("the policy copies its route hint on " + ", ".join(f"{v:.0%} ({k})" for k, v in shares.items())
                     + " of training tasks")
        below += [f"{v:.0%} hint agreement under {k} (goal {goal:.0%})" for k, v in shares.items() if v < goal]
    if "follows" in what:
        name_of = preset_of(reqs, prefs) if len(prefs) > 1 else {}
        by_pref, pref_tasks = spent([(name_of.get(r.traj.uid, ""), r) for r in results])
        rungs, rung_tasks = spent([(f"{PREFIX}{q['task']['pref']['cost']:g}", r)
                                   for q, r in zip(reqs_ladder, on_ladder, strict=True)])
        walked = adherence_of(sweep_points([{"policy": "p", "preference": k, "cost_usd": v, "correct": False}
                                            for k, v in rungs.items()], "p"))
        theirs = router({**{p: preset(p) for p in prefs}, **ladder}) if router else None
        mine = {p: {"cost_usd": v, "task_usd": pref_tasks[p]} for p, v in by_pref.items()}
        presets_c = preset_curve({"by_pref": mine},
                                 {"by_pref": {p: {"cost_usd": theirs[p]} for p in prefs}} if theirs else None)
        ladder_c = ladder_curve(rungs, theirs, list(ladder), rung_tasks)
        found, judged = problems(presets_c, ladder_c, goals, walked)
        curve = presets_c.policy if presets_c else []
        spread = curve[0] / curve[-1] if curve and curve[-1] > 0 else float("nan")
        out.update(pref_spread=spread, monotone=float(all(a > b for a, b in zip(curve, curve[1:]))) if curve else 0.0,
                   ladder_adherence=walked, ladder=ladder_c.policy, router_ladder=ladder_c.router, judged=judged)
        lines.append(f"accuracy-first spends {spread:.2f}x what cost-first spends; " + "; ".join(judged[1:])
                     + " (training tasks" + (", against the run's router)" if theirs else ", no router)"))
        below += found
    out.update(passed=not below, line="; ".join(lines), below="; ".join(below))
    return out


def spent(named: list[tuple[str, EpisodeResult]]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """(mean $ per name, the $ per task id per name) of (name, episode) pairs: the curves' points and what the
    verdict's per-step rule pairs over."""
    means: dict[str, list[float]] = {}
    for name, r in named:
        means.setdefault(name, []).append(r.traj.cost_usd)
    return ({k: mean(v) for k, v in means.items()},
            task_costs([{"policy": "", "preference": name, "task_id": r.traj.task_id, "cost_usd": r.traj.cost_usd}
                        for name, r in named], ""))


def checker(trainer: Any, what: list[str]) -> Callable[[int], dict[str, Any]]:
    """SFT's check as cluster/warm_start.sft_loop calls it, on the trainer's workers, training tasks and tool servers
    (the router played on the same tasks through them, once)."""
    c = trainer.cfg
    router = RouterOnTasks(c, trainer.dir, trainer.train[: c.eval.n_tasks],
                           trainer.scripted, trainer.tokenizer())
    goals = replace(goals_of(c), by_estimate=c.sft.check_falls == "estimate")  # sft.check_falls
    return lambda step: train_check(c, trainer.train, step, trainer.rollout, trainer.bars, trainer.sync_weights, what,
                                    goals, router)
