"""Does the recipe hold for every seed? `make train`'s recipe trained on several seeds, each judged as make train
judges itself (orchestra/eval/verdict.py), and the figures over seeds: the worst seed, never the best.

Usage: python bench/seeds.py [experiment=cpu_tiny] [seeds=5] [first=0] [root=runs/seeds] [redraw=null]
       [KEY=VALUE ...]
(other KEY=VALUEs go to cluster.train as config overrides). Seeds first .. first+seeds-1 are trained one after the
other (each alone on the machine: the trainer takes every core), in <root>/<experiment>/s<seed>. A run dir that
already holds a summary.json is read, not trained again, only when the config it saved (config.yaml, and no
config.<k>.yaml left by a resume under other settings) equals the one asked for, but for where the run lives
(run_dir, its corpus path); else the script stops with the keys that differ. The code is not compared: the commit a
run was trained at (bench_seeds.json, written when this script trains it) is printed beside today's, and the
machine (CPU, torch, transformers, scikit-learn, numpy) where it differs from this one: the same seed and commit on
another machine gives other figures, verdicts included. The seeds share their tasks (`data.seed` is not the run's
seed), so pooled intervals take a question's runs as one draw.

Per seed, INFO lines: the held-out figures after SFT and after RL, what the verdict judged, SFT's checks, and per
preset accuracy and $ of the policy and of its estimator router; a seed whose verdict is not ok is a WARNING. Then
RESULT lines over seeds (a minimum or maximum over seeds is nan when any seed's figure is nan: not measured is
never a pass):
  seeds_n, seeds_follows                  seeds run, seeds whose verdict is ok (follows its preference and its SFT
                                          reached its goal)
  seeds_min_pref_spread                   smallest accuracy-first $ / cost-first $
  seeds_all_monotone                      1 when $ falls strictly over the presets on every seed
  seeds_min_unseen_adherence              smallest −Spearman(cost weight, $) under the unseen sweep
  seeds_min_sweep_share                   smallest share, over seeds and the sweep's steps where the router's $ falls,
                                          of the policy's log-fall of $ to its router's (the verdict asks >= 1/3)
  seeds_min_sweep_ratio                   smallest $ at the sweep's lowest cost weight / $ at its second highest
  seeds_min_format_ok                     (goal >= 0.98)
  seeds_min_vs_estimator_hi               smallest upper end of (policy - its estimator router) (goal >= 0)
  seeds_max_abs_vs_estimator              largest |policy - its estimator router|
  seeds_min_rl_gain_hi                    smallest upper end of the kept policy's gain over its warm start (goal >= 0)
  seeds_rl_kept                           seeds whose RL policy was kept (algo.val_share, algo.keep_rl: on cpu_tiny RL
                                          significantly better than its warm start on training tasks it never sampled)
  seeds_rl_gain (_lo, _hi)                the kept policies' gain pooled over seeds, one paired interval
  seeds_min_hint_agreement                with route hints: the smallest held-out share copying the hint, over seeds
                                          and presets, after SFT (goal >= 0.9), and seeds_min_sft_agreement on the
                                          training tasks at SFT's last check
  seeds_sft_short                         seeds whose SFT stopped at sft.max_steps below its goal
  seeds_wall_s                            mean train_wall_s
  seeds_redraw_<draw>_follows             with redraw=DRAW: seeds whose kept policy, played with its router on another
                                          held-out draw (cluster/redraw.py; null: the draw runs before issue 69 used),
                                          follows by the same verdict: continuity, reported beside, never instead
A goal missed (nan included) is a WARNING line, and the script exits 1 when a seed or a goal fails.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from statistics import mean
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PRESETS = ("accuracy-first", "balanced", "cost-first")
OWN = ("experiment", "seeds", "first", "root", "redraw")
STAMP = "bench_seeds.json"  # the commit and the machine this script trained a run at
# RESULT name -> (">=", goal): a figure below it, or nan, fails
GOALS = {"seeds_min_format_ok": 0.98, "seeds_min_vs_estimator_hi": 0.0, "seeds_min_rl_gain_hi": 0.0,
         "seeds_min_hint_agreement": 0.9}


class Refused(Exception):
    """A run dir that holds a finished run of another config."""


def commit() -> str:
    """The checkout's commit, `+` when its tracked files differ from it ("" outside git)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT).returncode != 0
        return head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine() -> str:
    """The CPU and the wheels a run's arithmetic comes from: the same seed and commit on another CPU (or with another
    torch, transformers or scikit-learn) gives other figures, other verdicts included (docs/recipe.md, "The same
    recipe on another machine")."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    wheels = []
    for pkg in ("torch", "transformers", "scikit-learn", "numpy"):
        try:
            wheels.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return f"{cpu}, {os.cpu_count()} CPUs; " + ", ".join(wheels)


def config_diff(run_dir: Path, args: list[str]) -> list[str]:
    """Keys where the config `run_dir` saved differs from the one `args` give (cluster.train's arguments), but for
    where the run lives: its run_dir and the corpus path the trainer sets to the run's own (cluster/trainer.py)."""
    from omegaconf import OmegaConf

    from orchestra.config import load_config, to_yaml
    from orchestra.config.load import changed_keys

    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return ["config.yaml (none saved)"]
    resumed = sorted(p.name for p in run_dir.glob("config.*.yaml"))
    if resumed:
        return [f"{resumed[0]} (the run resumed under other settings)"]
    asked = OmegaConf.to_container(OmegaConf.create(to_yaml(load_config(args))))
    have = OmegaConf.to_container(OmegaConf.create(saved.read_text()))
    own = str(run_dir.resolve() / "data" / "corpus.jsonl")
    if have.get("zoo", {}).get("retriever", {}).get("corpus") == own and not asked["zoo"]["retriever"]["corpus"]:
        asked["zoo"]["retriever"]["corpus"] = own
    return [k for k in changed_keys(asked, have) if k != "run_dir"]


def train(experiment: str, seed: int, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """The run's summary: trained unless a finished run of the same config is there (Refused when another is)."""
    args = [f"experiment={experiment}", f"seed={seed}", f"run_dir={run_dir}", *overrides]
    summary = run_dir / "summary.json"
    if summary.is_file():
        diff = config_diff(run_dir, args)
        if diff:
            raise Refused(f"{run_dir} holds a finished run of another config ({', '.join(diff[:8])}"
                          + (f" and {len(diff) - 8} more" if len(diff) > 8 else "") + "): delete it or pick another root=")
        then = json.loads((run_dir / STAMP).read_text()) if (run_dir / STAMP).is_file() else {}
        print(f"INFO seeds: {run_dir} read (same config; trained at commit {then.get('commit') or 'unknown'}, the code "
              f"is at {commit() or 'unknown'})")
        here = machine()
        if then.get("machine", "") != here:  # a figure is its machine's: say so where they differ
            print(f"INFO seeds: {run_dir} was trained on {then.get('machine') or 'an unrecorded machine'}, this is "
                  f"{here}: its figures are that machine's")
        return json.loads(summary.read_text())
    cmd = [sys.executable, "-m", "cluster.train", *args]
    print(f"INFO seeds: {' '.join(cmd[2:])}", flush=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / STAMP).write_text(json.dumps({"commit": commit(), "machine": machine()}))
    subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(summary.read_text())


def redrawn(run_dir: Path, draw: str) -> dict[str, Any]:
    """The run judged on another held-out draw (cluster/redraw.py), computed once and kept in the run dir."""
    path = run_dir / f"redraw_{draw}" / "summary.json"
    if not path.is_file():
        subprocess.run([sys.executable, "-m", "cluster.redraw", str(run_dir), f"heldout_seed={draw}"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)  # its lines are printed below, per seed
    return json.loads(path.read_text())


def pooled(runs: list[dict[str, Any]], a: str, b: str) -> dict[str, float]:
    """Evaluation `a` minus `b` over every seed: pairs per (seed, preset, question), a question's pairs averaged into
    one bootstrap draw (orchestra/eval/stats.paired_bootstrap_diff); {} when no run has both."""
    from orchestra.eval.stats import paired_bootstrap_diff

    x, y, groups = [], [], []
    for run in runs:
        if not run.get(a) or not run.get(b):
            continue
        after = {(e["pref"], e["task"]): e["reward"] for e in run[a].get("rewards", [])}
        before = {(e["pref"], e["task"]): e["reward"] for e in run[b].get("rewards", [])}
        for key in sorted(set(after) & set(before)):
            x.append(after[key])
            y.append(before[key])
            groups.append(key[1])
    return paired_bootstrap_diff(x, y, groups) if x else {}


def sweep_share(s: dict[str, Any]) -> float:
    """The smallest ratio, over the unseen sweep's steps where its router's $ falls, of the policy's log-fall of $ to
    the router's (nan: no sweep, no router sweep, or a nan $)."""
    from orchestra.eval.verdict import curves, log_fall

    _, sweep, _ = curves(s, "rl")
    if sweep is None or sweep.router is None:
        return float("nan")
    pairs = [(log_fall(a, b), log_fall(c, d)) for a, b, c, d in
             zip(sweep.policy, sweep.policy[1:], sweep.router, sweep.router[1:])]
    ratios = [p / r if r > 0 else (float("nan") if math.isnan(p) else math.inf) for p, r in pairs]
    ratios = [x for x in ratios if x != math.inf]
    return worst(ratios) if ratios else float("nan")


def sweep_ratio(points: list[dict[str, float]]) -> float:
    """$ at the sweep's lowest cost weight / $ at its second highest (nan with fewer than three points or no $)."""
    ranked = sorted(points, key=lambda p: p["cost_weight"])
    if len(ranked) < 3 or not ranked[-2]["cost_usd"] > 0:
        return float("nan")
    return ranked[0]["cost_usd"] / ranked[-2]["cost_usd"]


def worst(values: list[float], largest: bool = False) -> float:
    """min (max) over seeds, nan when any value is nan (Python's min keeps a nan only when it comes first)."""
    if not values or any(math.isnan(v) for v in values):
        return float("nan")
    return max(values) if largest else min(values)


def describe_seed(seed: int, s: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """INFO lines for one seed's summary (a WARNING when its verdict is not ok), and its figures."""
    from orchestra.eval.verdict import goals_of, report, sft_goal, verdict

    nan = float("nan")
    v = verdict(s, goals_of(cfg), sft_goal(cfg))
    sft, rl = s.get("after_sft") or {}, s.get("after_rl") or {}
    print(f"INFO seed {seed}: after SFT spread {sft.get('pref_spread', nan):.2f} monotone {sft.get('monotone', nan):.0f};"
          f" after RL spread {rl.get('pref_spread', nan):.2f} monotone {rl.get('monotone', nan):.0f}, unseen adherence "
          f"{s.get('heldout_unseen_adherence', nan):.2f}, format_ok {rl.get('format_ok', nan):.3f}; rl_kept "
          f"{s.get('rl_kept', 'n/a')}; verdict {'ok' if v.ok else 'FAILS'}; SFT steps {s.get('sft_steps_done', 0)}"
          + (f" (start {s['sft_starts']}, {s.get('sft_steps_all')} in all)" if s.get("sft_starts", 1) > 1 else ""))
    for line in v.judged:
        print(f"INFO seed {seed} judged {line}")
    for c in s.get("sft_agreement_checks") or []:
        start = f" (start {c.get('start', 1)})" if s.get("sft_starts", 1) > 1 else ""
        print(f"INFO seed {seed} SFT check at {c.get('step')}{start}: "
              + ("passed" if c.get("passed") else c.get("below", "")))
    for tag, summ in (("after SFT", sft), ("after RL", rl), ("estimator router", s.get("router") or {})):
        by = summ.get("by_pref", {})
        if by:
            print(f"INFO seed {seed} {tag}: " + "; ".join(
                f"{p} acc {by[p]['accuracy']:.3f} ${by[p]['cost_usd']:.5f}" for p in PRESETS if p in by))
    if "hint_agreement_by_pref" in sft:
        print(f"INFO seed {seed} hint agreement after SFT: " + ", ".join(
            f"{p} {x:.0%}" for p, x in sft["hint_agreement_by_pref"].items()))
    for line in report(v, s):
        print(f"WARNING seed {seed}: {line}")
    points = (s.get("unseen_sweep") or {}).get("points") or []
    checks = s.get("sft_agreement_checks") or []
    return {"ok": v.ok, "sft_short": bool(v.sft_short), "spread": rl.get("pref_spread", nan),
            "monotone": rl.get("monotone", nan), "format_ok": rl.get("format_ok", nan),
            "adherence": s.get("heldout_unseen_adherence", nan), "sweep_share": sweep_share(s),
            "sweep_ratio": sweep_ratio(points), "vs_est": s.get("heldout_vs_estimator", nan),
            "vs_est_hi": s.get("heldout_vs_estimator_hi", nan), "rl_gain_hi": s.get("heldout_reward_gain_hi", nan),
            "rl_kept": s.get("rl_kept"),
            "hint": min(sft["hint_agreement_by_pref"].values()) if "hint_agreement_by_pref" in sft else None,
            "sft_agreement": min((x for k, x in checks[-1].items() if k.startswith("hint_")), default=None)
            if checks else None,
            "wall": s.get("train_wall_s", nan)}


def aggregate(seeds: list[dict[str, Any]]) -> dict[str, float]:
    """The RESULT figures over the seeds' figures (`describe_seed`): worst seed first, nan where any seed is nan."""
    out = {"seeds_n": float(len(seeds)), "seeds_follows": float(sum(bool(x["ok"]) for x in seeds)),
           "seeds_min_pref_spread": worst([x["spread"] for x in seeds]),
           "seeds_all_monotone": float(all(x["monotone"] == 1 for x in seeds)),
           "seeds_min_unseen_adherence": worst([x["adherence"] for x in seeds]),
           "seeds_min_sweep_share": worst([x["sweep_share"] for x in seeds]),
           "seeds_min_sweep_ratio": worst([x["sweep_ratio"] for x in seeds]),
           "seeds_min_format_ok": worst([x["format_ok"] for x in seeds]),
           "seeds_min_vs_estimator_hi": worst([x["vs_est_hi"] for x in seeds]),
           "seeds_max_abs_vs_estimator": worst([abs(x["vs_est"]) for x in seeds], largest=True),
           "seeds_min_rl_gain_hi": worst([x["rl_gain_hi"] for x in seeds]),
           "seeds_sft_short": float(sum(x["sft_short"] for x in seeds)),
           "seeds_wall_s": mean(x["wall"] for x in seeds) if seeds else float("nan")}
    if all(x["rl_kept"] is not None for x in seeds):
        out["seeds_rl_kept"] = float(sum(int(x["rl_kept"]) for x in seeds))
    if seeds and all(x["hint"] is not None for x in seeds):
        out["seeds_min_hint_agreement"] = worst([x["hint"] for x in seeds])
    if seeds and all(x["sft_agreement"] is not None for x in seeds):
        out["seeds_min_sft_agreement"] = worst([x["sft_agreement"] for x in seeds])
    return out


def failures(out: dict[str, float]) -> list[str]:
    """A line per missed goal: a seed whose verdict is not ok, a RESULT figure of GOALS below its goal or nan."""
    lines = []
    if out["seeds_follows"] < out["seeds_n"]:
        lines.append(f"{out['seeds_n'] - out['seeds_follows']:.0f} of {out['seeds_n']:.0f} seeds fail their verdict")
    for name, goal in GOALS.items():
        if name in out and not out[name] >= goal:  # nan fails
            lines.append(f"{name}={out[name]:.4f} (goal >= {goal:g})")
    return lines


def table(runs: list[dict[str, Any]]) -> None:
    """Per router and preset: accuracy and $ as the mean over seeds with its range (the README's rows)."""
    for tag, name in (("after_rl", "orchestrator"), ("router", "estimator router")):
        cells = []
        for p in PRESETS:
            rows = [r[tag]["by_pref"][p] for r in runs if r.get(tag) and p in r[tag].get("by_pref", {})]
            if not rows:
                continue
            acc, usd = [x["accuracy"] for x in rows], [100 * x["cost_usd"] for x in rows]
            cells.append(f"{p} {mean(acc):.3f} ({min(acc):.3f}-{max(acc):.3f}) / {mean(usd):.3f} ¢ "
                         f"({min(usd):.3f}-{max(usd):.3f})")
        print(f"INFO over {len(runs)} seeds, {name}: " + "; ".join(cells))


def main(argv: list[str]) -> int:
    from orchestra.config import load_config

    args = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in OWN)
    overrides = [a for a in argv if a.split("=", 1)[0] not in OWN]
    experiment = args.get("experiment", "cpu_tiny")
    first, n = int(args.get("first", 0)), int(args.get("seeds", 5))
    root = Path(args.get("root", ROOT / "runs" / "seeds")) / Path(experiment).stem
    cfg = load_config([f"experiment={experiment}", *overrides])
    print(f"INFO seeds: on {machine()} (figures are this machine's: another CPU or wheel gives others)", flush=True)
    try:
        runs = [train(experiment, s, root / f"s{s}", overrides) for s in range(first, first + n)]
    except Refused as e:
        print(f"WARNING seeds: {e}")
        return 2
    seeds = [describe_seed(s, r, cfg) for s, r in zip(range(first, first + n), runs, strict=True)]
    table(runs)
    out = aggregate(seeds)
    if "redraw" in args:  # the same policies on another held-out draw, judged alike: continuity
        from cluster.redraw import lines

        follows = 0
        for s in range(first, first + n):
            other = redrawn(root / f"s{s}", args["redraw"])
            follows += bool(other["verdict"]["follows"])
            for line in lines(other):
                print(line.replace("INFO redraw", f"INFO seed {s} redraw").replace("RESULT redraw", f"INFO seed {s} redraw"))
        out[f"seeds_redraw_{args['redraw']}_follows"] = float(follows)
    gain = pooled(runs, "after_rl", "after_sft")
    out["seeds_rl_gain"], out["seeds_rl_gain_lo"], out["seeds_rl_gain_hi"] = (
        gain.get("diff", math.nan), gain.get("lo", math.nan), gain.get("hi", math.nan))
    if gain:
        print(f"INFO the kept policies' gain over their warm starts, {n} seeds pooled: {gain['diff']:+.4f} "
              f"[{gain['lo']:+.4f}, {gain['hi']:+.4f}] ({gain['n']:.0f} questions, a question's seeds and presets one "
              "draw)")
    for k, v in out.items():
        print(f"RESULT {k}={v:.4f}")
    missed = failures(out)
    for line in missed:
        print(f"WARNING seeds: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
