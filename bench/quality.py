"""Orchestration quality: the trained orchestrator vs fixed routers on held-out tasks.

`python bench/quality.py [replay_run=DIR] [sim_run=DIR] [replay_experiment=NAME] [sim_experiment=NAME]
 [train=true] [n=100] [seeds=2] [only=replay|sim]`

For each setting — the MMLU-Pro replay preset (experiment=mmlu_pro_replay: six real models' recorded
outcomes; figures `quality_*`) and the embedded default (experiment=cpu_tiny, simulated zoo; `sim_quality_*`)
— it takes the newest good checkpoint in the run directory (default runs/<experiment name>), training one
first with `python -m cluster.train` when there is none and train=true (the default), then evaluates it
under the accuracy-first / balanced / cost-first / latency-first presets beside the baselines
(cluster/evaluate.py) and prints:
  RESULT quality_acc_gap=...       always-strongest accuracy − orchestrator (balanced) accuracy, points
  RESULT quality_cost_ratio=...    orchestrator (balanced) $ ÷ always-strongest $
  RESULT quality_on_frontier=1|0   orchestrator (balanced) on or above the fixed routers' frontier
  RESULT quality_monotone=1|0      $ falls strictly as the cost weight rises (accuracy-first > balanced > cost-first)
  RESULT quality_pref_spread=...   accuracy-first $ ÷ cost-first $ (goal >= 3)
  RESULT quality_adherence=...     −Spearman(cost weight, mean $) over a sweep of the cost weight (0.05, 0.2, 0.5,
                                   1, 2; accuracy 1): 1.0 = $ falls strictly as the weight rises (goal >= 0.9)
  RESULT quality_vs_estimator=...  the smallest orchestrator − estimator router score difference over the presets
  RESULT quality_acc_first_gap=... always-strongest − orchestrator accuracy under accuracy-first, points
  RESULT quality_match_strongest_cost_ratio=...  lowest sweep-point $ ÷ always-strongest $ among points at least
                                   as accurate as always-strongest (inf: none is)
and the same figures for the estimator router the run fitted (`quality_estimator_*`; orchestra/routing/), which
is evaluated beside the orchestrator whenever the run has one; on replay zoos RouteLLM's yardstick
(`quality_yardstick_*`, cluster/evaluate.py `yardstick`, docs/quality.md): APGR and CPT(20/50/80 %) of the
estimator router and of the orchestrator's operating points (presets and sweep), on the strong-call share for two
models and on $ for more (`yardstick_usd_*`), plus the oracle's APGR.
Reports (JSON, markdown, plots) land in <run dir>/quality/.
It also prints (INFO, not a RESULT) the family-router bound (orchestra/eval/routing_bound.py): the best accuracy a
router that picks one route per task family (MMLU-Pro: subject), chosen in hindsight, could reach at 35 % of
the strongest's $, and the $ it needs to come within 2 points — from recorded outcomes on replay zoos (the
evaluated questions and every recorded one), from running every one- and two-call plan elsewhere.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {"replay": ("mmlu_pro_replay", "quality_"), "sim": ("cpu_tiny", "sim_quality_")}


def has_checkpoint(run_dir: Path) -> bool:
    from orchestra.rundir import checkpoint

    return (run_dir / "checkpoints").is_dir() and checkpoint.latest_good(run_dir) is not None


def figures(experiment: str, run_dir: Path, n: int, seeds: int, train: bool) -> dict[str, float] | None:
    from cluster.evaluate import build
    from cluster.yardstick import yardstick
    from orchestra.config import load_config
    from orchestra.eval.report import write_report
    from orchestra.eval.runner import load_done
    from orchestra.eval.tool_bands import catalogue_ids

    if not has_checkpoint(run_dir):
        if not train:
            print(f"[{experiment}] no checkpoint in {run_dir} and train=false: skipped", flush=True)
            return None
        print(f"[{experiment}] training a policy into {run_dir} ...", flush=True)
        subprocess.run([sys.executable, "-m", "cluster.train", f"experiment={experiment}", f"run_dir={run_dir}"],
                       cwd=ROOT, check=True)
    cfg = load_config([f"experiment={experiment}", f"run_dir={run_dir}"])
    n = min(n, cfg.data.n_heldout)
    own = {"checkpoint": str(run_dir), "preference": "all", "seeds": str(seeds), "n": str(n),
           "out": str(run_dir / "quality")}
    ev, tasks, policies, prefs, seed_list, out = build(cfg, own)
    records = asyncio.run(ev.run(tasks, policies, prefs, seed_list))
    report = write_report(records, out, meta={"experiment": experiment, "seeds": seed_list, "n_tasks": len(tasks)},
                          catalogue=catalogue_ids(tasks, cfg.zoo.tiers))
    print((out / "report.md").read_text(), flush=True)
    quality = dict(report.get("quality") or {})
    quality.update(sweep(ev, tasks, policies, seed_list, report))
    # RouteLLM's yardstick (replay zoos): the presets' and the sweep's episodes are the policy's operating points
    done = [r for r in load_done(ev.results_path).values() if r["seed"] in seed_list]
    quality.update(yardstick(cfg, tasks, done, ev.routers, out))
    family_bounds(cfg, ev, tasks, seed_list, report)
    per_question(cfg, tasks, records)
    return quality


def sweep(ev, tasks, policies, seeds, report) -> dict[str, float]:
    """The cost-weight sweep (orchestra/eval/adherence.py) for the orchestrator and the estimator router: one
    INFO line per policy and point, and the adherence / match-strongest figures (the estimator's prefixed)."""
    from orchestra.eval.adherence import (
        adherence,
        match_strongest_cost_ratio,
        sweep_points,
        sweep_preferences,
    )

    learned = [p for p in ("orchestrator", "estimator") if p in policies]
    strong = next((r for r in report.get("rows", []) if r["policy"] == "strongest"), None)
    if not learned:
        return {}
    prefs = sweep_preferences()
    records = asyncio.run(ev.run(tasks, learned, prefs, seeds, pref_policies=tuple(learned)))
    out: dict[str, float] = {}
    for policy in learned:
        points = sweep_points(records, policy)
        for w, usd, acc in points:
            print(f"INFO sweep {policy}: cost weight {w:g}: accuracy {acc:.3f}, {100 * usd:.4f} cents", flush=True)
        key = "" if policy == "orchestrator" else "estimator_"
        out[f"{key}adherence"] = adherence(points)
        if strong is not None:
            out[f"{key}match_strongest_cost_ratio"] = match_strongest_cost_ratio(
                points, strong["cost_cents"] / 100, strong["accuracy"])
    return out


def per_question(cfg, tasks, records) -> None:
    """INFO lines (replay zoos): does routing vary *within* a subject with the question? Per preset, the
    orchestrator's share of answers sent to the strongest tier, by question difficulty (how many of the
    recorded models got it wrong) and, within each subject, the spread of that share between its easiest and
    hardest questions. A router that knows only the subject has one share per subject whatever the question."""
    from collections import defaultdict

    from orchestra.config import task_tiers
    from tools.registry import build_experts

    if not any(e.kind == "replay" for e in cfg.zoo.experts.values()):
        return
    experts = build_experts(cfg.zoo)
    tiers = {t: e for t, e in task_tiers(cfg).items() if t.startswith("answer")}
    recs = {t: experts[e].records() for t, e in tiers.items()}
    strongest = next(iter(tiers))  # answer-1 is the priciest tier in the replay zoo
    wrong, family = {}, {}
    for t in tasks:
        qid = str(t.meta.get("question_id", t.id))
        got = [r.get(qid) for r in recs.values()]
        if all(g is not None for g in got):
            wrong[t.id], family[t.id] = sum(not g.correct for g in got), str(t.meta.get("family", "all"))
    for pref in ("accuracy-first", "balanced", "cost-first"):
        by_level: dict[str, list[float]] = defaultdict(list)
        by_fam: dict[str, dict[bool, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in records:
            if r["policy"] != "orchestrator" or r["preference"] != pref or r["task_id"] not in wrong:
                continue
            share = float(r["tool_counts"].get(strongest, 0) > 0)
            w = wrong[r["task_id"]]
            by_level["0-1" if w <= 1 else "2-3" if w <= 3 else "4-6"].append(share)
            by_fam[family[r["task_id"]]][w >= 3].append(share)
        if not by_level:
            continue
        levels = ", ".join(f"{k} wrong: {sum(v) / len(v):.2f} (n={len(v)})" for k, v in sorted(by_level.items()))
        gaps = [sum(v[True]) / len(v[True]) - sum(v[False]) / len(v[False]) for v in by_fam.values()
                if v[True] and v[False]]
        spread = sum(abs(g) for g in gaps) / len(gaps) if gaps else float("nan")
        print(f"INFO per-question routing ({pref}): share sent to {strongest} by how many of "
              f"{len(recs)} recorded models were wrong: {levels}; within a subject, hard (>=3 wrong) minus easy "
              f"share: mean |diff| {spread:.2f} over {len(gaps)} subjects", flush=True)


def _bound_line(label: str, outcomes: dict, n: int, ref: str, ref_acc: float, ref_usd: float) -> None:
    from orchestra.eval.routing_bound import best_accuracy_at, cheapest_reaching, family_frontier

    front = family_frontier(outcomes, n)
    acc35 = best_accuracy_at(front, 0.35 * ref_usd)
    need = cheapest_reaching(front, ref_acc - 0.02) / ref_usd
    print(f"INFO family-router bound ({label}, n={n}, in-sample): at 35% of {ref}'s $ accuracy <= {acc35:.3f} "
          f"(gap {100 * (ref_acc - acc35):.2f} points to its {ref_acc:.3f}); coming within 2 points needs "
          f">= {need:.3f} of its $", flush=True)


def family_bounds(cfg, ev, heldout, seeds, report) -> None:
    """INFO lines: what routers that pick one route per task family (MMLU-Pro: subject) could reach here,
    chosen after seeing the outcomes (orchestra/eval/routing_bound.py): recorded outcomes on replay zoos (the
    evaluated questions and every recorded one); every one- and two-call plan, run, where the catalogue
    has more tools than `answer`."""
    import copy

    from orchestra.config import task_tiers
    from orchestra.eval.routing_bound import outcomes_of_episodes, plan_scripts, recorded_outcomes

    if any(e.kind == "replay" for e in cfg.zoo.experts.values()):
        from orchestra.data.loaders import load
        from tools.registry import build_experts

        experts = build_experts(cfg.zoo)
        tiers = {t: e for t, e in task_tiers(cfg).items() if t.startswith("answer")}
        sets = [("recorded outcomes, evaluated questions", heldout)]
        if str(cfg.data.source).startswith("loader:"):
            _, name, path = (str(cfg.data.source).split(":", 2) + [""])[:3]
            sets.append(("recorded outcomes, every question", load(name, path, mapping=tiers).tasks))
        for label, tasks in sets:
            outcomes, n = recorded_outcomes(tasks, tiers, experts)
            if n:
                cost = {t: sum(f[t][0] for f in outcomes.values()) / n for t in tiers}
                top = max(cost, key=cost.get)  # the strongest baseline's tier: the priciest
                _bound_line(label, outcomes, n, tiers[top], sum(f[top][1] for f in outcomes.values()) / n, cost[top])
    schemas = ev.tool_clients[seeds[0]].schemas(heldout[0])
    strongest = next((r for r in report.get("rows", []) if r["policy"] == "strongest"), None)
    if len(schemas) < 2 or strongest is None:
        return
    plans = plan_scripts(schemas)
    print(f"[bound] running {len(plans)} fixed plans x {len(heldout)} tasks x {len(seeds)} seeds ...", flush=True)
    runner = copy.copy(ev)
    runner.scripts, runner.results_path = plans, None
    records = asyncio.run(runner.run(heldout, list(plans), {cfg.eval.preference: None}, seeds))
    outcomes, n = outcomes_of_episodes(records)
    _bound_line("fixed plans per family, evaluated tasks", outcomes, n, "strongest", strongest["accuracy"],
                strongest["cost_cents"] / 100)


def main(argv: list[str]) -> int:
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    n, seeds = int(args.get("n", 100)), int(args.get("seeds", 2))
    train = args.get("train", "true").lower() == "true"
    chosen = [args["only"]] if "only" in args else list(SETTINGS)
    for key in chosen:
        experiment, prefix = SETTINGS[key]
        experiment = args.get(f"{key}_experiment", experiment)  # e.g. sim_experiment=cpu_smollm2
        run_dir = Path(args.get(f"{key}_run") or ROOT / "runs" / experiment).resolve()
        q = figures(experiment, run_dir, n, seeds, train)
        if q is None:
            continue
        for name in ("acc_gap", "cost_ratio", "on_frontier", "monotone", "pref_spread", "adherence",
                     "vs_estimator", "acc_first_gap", "match_strongest_cost_ratio", "estimator_acc_gap",
                     "estimator_cost_ratio", "estimator_on_frontier", "estimator_monotone", "estimator_pref_spread",
                     "estimator_acc_first_gap", "estimator_adherence", "estimator_match_strongest_cost_ratio"):
            if name in q:
                print(f"RESULT {prefix}{name}={q[name]:.4f}", flush=True)
        for name in sorted(k for k in q if k.startswith("yardstick_")):
            print(f"RESULT {prefix}{name}={q[name]:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
