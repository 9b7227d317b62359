"""Orchestration quality: the trained orchestrator vs fixed routers on held-out tasks.

`python bench/quality.py [replay_run=DIR] [sim_run=DIR] [replay_experiment=NAME] [sim_experiment=NAME]
 [train=true] [n=100] [seeds=2] [only=replay|sim|routers] [routers_seeds=1] [mmlu_train=N] [mmlu_heldout=N]
 [mmlu_extra=N] [routers_sets=ra,mmlu,pair] [pair_strong=E] [pair_weak=E] [pair_families=F+F] [pair_heldout=N]
 [routers_text_stats=true|false]`

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
  RESULT quality_adherence=...     −Spearman(cost weight, mean $) over a sweep of the cost weight (0.03, 0.1, 0.3,
                                   1, 3; accuracy 1, latency 0): 1.0 = $ falls strictly as the weight rises (goal
                                   >= 0.9). No sweep vector is one the run trained on (checked against the run's
                                   config and training tasks: cluster/heldout.unseen_sweep)
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
Every difference behind a figure is printed with its paired bootstrap 95 % interval (`INFO paired ...`,
orchestra/eval/stats.py). On the simulated zoo the per-family best fixed plan, fitted on the run's exploration
outcomes, is printed (`INFO simulated: family_*`) beside every figure against always-strongest: there a fixed plan
per family beats the simulated always-strongest too, which says what such a win is worth.
`only=routers` (also part of the default run) needs no policy: the estimator router (selected per run), the same
estimator before the selection, and the per-family fixed router, fitted on a training split of recorded outcomes
and judged on the held-out rest (orchestra/routing/holdout.py): RouterArena's two-model log (`routers_ra_*`; the
importer's split, a fifth held out) and the MMLU-Pro replay preset's split (`routers_mmlu_*`; the routers train on
its data.n_train questions plus its router.extra_tasks, as its runs' router; `mmlu_train` / `mmlu_extra` /
`mmlu_heldout` change those sizes), and a two-model log cut from that zoo (`routers_pair_*`; orchestra/routing/holdout.py
`replay_pair`: gemini-1.5-pro-002 vs mixtral-8x7b, RouteLLM's weak model, on the math questions, a quarter held out,
the embedding alone as a log without metadata would give; read the usual way, strong = pricier and better, unlike
RouterArena's): held-out log-loss,
the yardstick, the family router's largest lead over the estimator's accuracy-vs-$ curve (`max_gap_*`, points),
and per preset accuracy / $ / reward with paired intervals.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = {"replay": ("mmlu_pro_replay", "quality_"), "sim": ("cpu_tiny", "sim_quality_")}
# figures that say how a router does against always-strongest: on the simulated zoo each is printed beside the
# per-family best fixed plan's (`fixed_family`), which beats a simulated always-strongest easily too
BEATS_STRONGEST = ("acc_gap", "cost_ratio", "acc_first_gap", "match_strongest_cost_ratio", "estimator_acc_gap",
                   "estimator_cost_ratio", "estimator_acc_first_gap", "estimator_match_strongest_cost_ratio")


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
    conf = run_dir / "config.yaml"  # the config the run was trained with (its prompt's rendering), as Serve adopts it
    cfg = load_config([f"experiment={conf if conf.is_file() else experiment}", f"run_dir={run_dir}"])
    n = min(n, cfg.data.n_heldout)
    own = {"checkpoint": str(run_dir), "preference": "all", "seeds": str(seeds), "n": str(n),
           "out": str(run_dir / "quality")}
    ev, tasks, policies, prefs, seed_list, out = build(cfg, own)
    records = asyncio.run(ev.run(tasks, policies, prefs, seed_list))
    report = write_report(records, out, meta={"experiment": experiment, "seeds": seed_list, "n_tasks": len(tasks)},
                          catalogue=catalogue_ids(tasks, cfg.zoo.tiers))
    print((out / "report.md").read_text(), flush=True)
    quality = dict(report.get("quality") or {})
    quality.update(sweep(ev, tasks, policies, seed_list, report, unseen(run_dir)))
    # RouteLLM's yardstick (replay zoos): the presets' and the sweep's episodes are the policy's operating points
    done = [r for r in load_done(ev.results_path).values() if r["seed"] in seed_list]
    quality.update(yardstick(cfg, tasks, done, ev.routers, out))
    paired_gains(records)
    bound = family_bounds(cfg, ev, tasks, seed_list, report)
    if bound is not None:
        quality.update(fixed_family(cfg, run_dir, tasks, bound, records))
    per_question(cfg, tasks, records)
    return quality


def paired_gains(records) -> None:
    """INFO lines: every difference the RESULT figures stand for, with its paired bootstrap 95 % interval
    (orchestra/eval/stats.py; pairs are (task, seed), resampled by task): accuracy and $ of each learned policy
    vs always-strongest under each preset, and orchestrator − estimator router score."""
    from orchestra.eval.stats import fmt_diff, paired_records

    prefs = sorted({r["preference"] for r in records if r["policy"] in ("orchestrator", "estimator")})
    for policy in ("orchestrator", "estimator"):
        for pref in prefs:
            acc = paired_records(records, (policy, pref), ("strongest", None), "correct", 100.0)
            usd = paired_records(records, (policy, pref), ("strongest", None), "cost_usd", 100.0)
            if acc is not None and usd is not None:
                print(f"INFO paired {policy} − always-strongest ({pref}): accuracy {fmt_diff(acc, digits=1)} points, "
                      f"$ {fmt_diff(usd, digits=4)} ¢ per episode", flush=True)
    for pref in prefs:
        d = paired_records(records, ("orchestrator", pref), ("estimator", pref), "reward")
        if d is not None:
            print(f"INFO paired orchestrator − estimator score ({pref}): {fmt_diff(d)}", flush=True)


def fixed_family(cfg, run_dir: Path, heldout, bound, records) -> dict[str, float]:
    """Simulated zoo: the per-family best fixed plan (orchestra/routing/family.py) fitted on the run's exploration
    outcomes (<run>/router/explore.jsonl, training tasks), its episodes taken from the bound run of every plan on
    the held-out tasks: the `family_*` figures printed beside each "beats always-strongest" one, and INFO lines
    with paired intervals. {} without exploration outcomes."""
    from orchestra.eval.adherence import match_strongest_cost_ratio, sweep_preferences
    from orchestra.eval.stats import fmt_diff, paired_records
    from orchestra.jsonl import load_jsonl
    from orchestra.preferences import preset
    from orchestra.routing.family import FamilyRouter, routed_records
    from orchestra.routing.plans import Outcome, Plan

    path = run_dir / "router" / "explore.jsonl"
    if not path.is_file():
        return {}
    explored = load_jsonl(path)
    names = sorted({r["policy"] for r in bound})
    fam = FamilyRouter([Plan(n, ()) for n in names]).fit_families(  # presets weigh no tool: calls not needed
        {r["task_id"]: str(r.get("family") or "all") for r in explored},
        [Outcome.from_record(r) for r in explored if r["policy"] in names])
    strong = [r for r in records if r["policy"] == "strongest"]
    s_acc, s_usd = (sum(float(r[k]) for r in strong) / max(len(strong), 1) for k in ("correct", "cost_usd"))
    rc, out, points = cfg.reward, {}, []
    prefs = {p: preset(p) for p in ("accuracy-first", "balanced", "cost-first")} | sweep_preferences()
    for name, pref in prefs.items():
        recs = routed_records(fam, heldout, bound, pref, rc.cost_scale, rc.latency_scale, "family", name)
        acc, usd = (sum(float(r[k]) for r in recs) / max(len(recs), 1) for k in ("correct", "cost_usd"))
        if name.startswith("sweep:"):
            points.append((pref["cost"], usd, acc))
            continue
        d = paired_records(recs + strong, ("family", name), ("strongest", None), "correct", 100.0)
        print(f"INFO simulated: per-family best fixed plan ({name}; fitted on the run's exploration): accuracy "
              f"{acc:.3f} at {100 * usd:.4f} ¢; − always-strongest {fmt_diff(d, digits=1) if d else 'n/a'} points, "
              f"{usd / s_usd if s_usd else float('nan'):.2f} of its $", flush=True)
        if name == "balanced":
            out["family_acc_gap"], out["family_cost_ratio"] = 100 * (s_acc - acc), usd / s_usd if s_usd else float("inf")
        if name == "accuracy-first":
            out["family_acc_first_gap"] = 100 * (s_acc - acc)
    out["family_match_strongest_cost_ratio"] = match_strongest_cost_ratio(points, s_usd, s_acc)
    return out


def unseen(run_dir: Path) -> dict[str, dict[str, float]]:
    """The adherence sweep's vectors, checked (ValueError) against every vector the run trained on: its saved
    config and training tasks (cluster/heldout.unseen_sweep); unchecked only for a run dir without them."""
    from cluster.heldout import unseen_sweep
    from orchestra.config import load_config
    from orchestra.data.tasks import load_tasks
    from orchestra.eval.adherence import sweep_preferences

    conf, train = run_dir / "config.yaml", run_dir / "data" / "train.jsonl"
    if not (conf.is_file() and train.is_file()):
        print(f"INFO sweep: {run_dir} keeps no config.yaml + data/train.jsonl: the sweep is not checked against "
              "its training vectors", flush=True)
        return sweep_preferences()
    return unseen_sweep(load_config([f"experiment={conf}"]), load_tasks(train))


def sweep(ev, tasks, policies, seeds, report, prefs=None) -> dict[str, float]:
    """The cost-weight sweep (orchestra/eval/adherence.py; `prefs`: its vectors as `unseen` checked them) for the
    orchestrator and the estimator router: one INFO line per policy and point, and the adherence /
    match-strongest figures (the estimator's prefixed)."""
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
    prefs = prefs or sweep_preferences()
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


def family_bounds(cfg, ev, heldout, seeds, report) -> list | None:
    """INFO lines: what routers that pick one route per task family (MMLU-Pro: subject) could reach here,
    chosen after seeing the outcomes (orchestra/eval/routing_bound.py): recorded outcomes on replay zoos (the
    evaluated questions and every recorded one); every one- and two-call plan, run, where the catalogue
    has more tools than `answer` (those episodes are returned, else None)."""
    import copy

    from orchestra.config import task_tiers
    from orchestra.eval.routing_bound import outcomes_of_episodes, recorded_outcomes
    from orchestra.routing.plans import plan_scripts

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
        return None
    plans = plan_scripts(schemas)
    print(f"[bound] running {len(plans)} fixed plans x {len(heldout)} tasks x {len(seeds)} seeds ...", flush=True)
    runner = copy.copy(ev)
    runner.scripts, runner.results_path = plans, None
    records = asyncio.run(runner.run(heldout, list(plans), {cfg.eval.preference: None}, seeds))
    outcomes, n = outcomes_of_episodes(records)
    _bound_line("fixed plans per family, evaluated tasks", outcomes, n, "strongest", strongest["accuracy"],
                strongest["cost_cents"] / 100)
    return records


# ---------------------------------------------------------------- only=routers: routers on recorded outcomes
def routers(args: dict[str, str], embed=None) -> dict[str, dict[str, float]]:
    """`only=routers`: the estimator router (per-run selection), the same before the selection, and the per-family
    fixed router, fitted on a training split of recorded outcomes and judged on the held-out rest
    (orchestra/routing/holdout.py); INFO lines, and figures per data set (RouterArena: `routers_ra_*`, MMLU-Pro
    replay: `routers_mmlu_*`). `routers_seeds=K` repeats over K splits and reports the mean of each figure."""
    import numpy as np

    from orchestra.config import load_config
    from orchestra.config.schema import RouterConfig
    from orchestra.routing.holdout import compare, replay_pair, replay_zoo, router_arena
    from tools.registry import build_experts
    from tools.retrieval.dense import Embedder

    # the precision runs fit with (router.embed_dtype), or `routers_embed_dtype=float32`; through the embedder's
    # query cache, sized so that every split of a set reuses the questions the first one embedded
    embed = embed or Embedder(dtype=args.get("routers_embed_dtype", RouterConfig().embed_dtype),
                              query_cache_size=50_000).encode_queries

    # `routers_text_stats=true|false`: the `text` candidate (router.text_stats) on every set; default: the presets'
    given = args.get("routers_text_stats")
    stats = [f"router.text_stats={given}"] if given else []
    text_stats = given.lower() == "true" if given else RouterConfig().text_stats

    def mmlu(seed: int):
        sizes = [f"{k}={args[a]}" for k, a in (("data.n_train", "mmlu_train"), ("data.n_heldout", "mmlu_heldout"),
                                               ("router.extra_tasks", "mmlu_extra")) if a in args]
        cfg = load_config(["experiment=mmlu_pro_replay", f"seed={seed}", f"data.seed={seed}", *sizes, *stats])
        return replay_zoo(cfg, build_experts(cfg.zoo), embed)

    def pair(seed: int):  # a two-model log cut from the replay zoo, read the usual way (strong = pricier, better)
        cfg = load_config(["experiment=mmlu_pro_replay", *stats])
        return replay_pair(cfg, build_experts(cfg.zoo), embed, args.get("pair_strong", "gemini-1.5-pro-002"),
                           args.get("pair_weak", "mixtral-8x7b"), args.get("pair_families", "math").split("+"),
                           seed, int(args.get("pair_heldout", -1)))

    sets = {"ra": lambda s: router_arena(embed, s, int(args.get("ra_heldout", -1)), text_stats=text_stats),
            "mmlu": mmlu, "pair": pair}
    out = {}
    for name in args.get("routers_sets", "ra,mmlu,pair").split(","):
        per_seed = []
        for s in range(int(args.get("routers_seeds", 1))):
            rec, train, test, cost_scale, latency_scale = sets[name](s)
            figures, lines = compare(rec, train, test, cost_scale, latency_scale, label=f"{name}, split {s}", seed=s)
            for line in lines:
                print(f"INFO routers {line}", flush=True)
            per_seed.append(figures)
        out[name] = {k: float(np.mean([f[k] for f in per_seed])) for k in per_seed[0]}
    return out

def main(argv: list[str]) -> int:
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    n, seeds = int(args.get("n", 100)), int(args.get("seeds", 2))
    train = args.get("train", "true").lower() == "true"
    chosen = [args["only"]] if "only" in args else [*SETTINGS, "routers"]
    if "routers" in chosen:
        for name, figs in routers(args).items():
            for k, v in sorted(figs.items()):
                print(f"RESULT routers_{name}_{k}={v:.4f}", flush=True)
    for key in (k for k in chosen if k in SETTINGS):
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
            beside = "family_" + name.removeprefix("estimator_")  # the same figure for the per-family fixed plan
            if key == "sim" and name in BEATS_STRONGEST and beside in q:
                print(f"INFO simulated: {beside}={q[beside]:.4f} (per-family best fixed plan, beside {prefix}{name})",
                      flush=True)
        for name in sorted(k for k in q if k.startswith("yardstick_")):
            print(f"RESULT {prefix}{name}={q[name]:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
