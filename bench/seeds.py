"""Does the recipe hold for every seed? `make train`'s recipe trained on several seeds, each judged as make train
judges itself (orchestra/eval/verdict.py), and the figures over seeds: the worst seed, never the best.

Usage: python bench/seeds.py [experiment=cpu_tiny] [seeds=5] [first=0] [root=runs/seeds] [KEY=VALUE ...]
(other KEY=VALUEs go to cluster.train as config overrides). Seeds first .. first+seeds-1 are trained one after the
other (each alone on the machine: the trainer takes every core), in <root>/<experiment>/s<seed>; a run dir that
already holds a summary.json is read, not trained again (delete it to rerun). The seeds share their tasks
(`data.seed` is not the run's seed), so pooled intervals take a question's runs as one draw.

Per seed, INFO lines: the held-out figures after SFT and after RL, the verdict and where the preference was lost,
SFT's agreement with its route hints (hinted presets), and per preset accuracy and $ of the policy and of its
estimator router. Then RESULT lines over seeds:
  seeds_n, seeds_follows                  seeds run, seeds whose policy follows its preference
  seeds_min_pref_spread                   smallest accuracy-first $ / cost-first $ (goal >= 3)
  seeds_all_monotone                      1 when $ falls strictly over the presets on every seed
  seeds_min_unseen_adherence              smallest adherence under the unseen cost weights (goal >= 0.9)
  seeds_min_sweep_ratio                   smallest $ at the sweep's lowest cost weight / $ at its second highest:
                                          how far $ falls before the last point, which alone can carry adherence
                                          (a policy flat over four of five points scored 0.97; the estimator router
                                          falls about 9x there)
  seeds_min_format_ok                     (goal >= 0.98)
  seeds_min_vs_estimator_hi               smallest upper end of (policy - its estimator router) (goal >= 0)
  seeds_max_abs_vs_estimator              largest |policy - its estimator router| (hinted recipes: within 0.01)
  seeds_min_rl_gain_hi                    smallest upper end of RL's gain over its warm start (goal >= 0: on no seed
                                          is RL significantly harmful)
  seeds_rl_gain (_lo, _hi)                RL's gain pooled over seeds, one paired interval, questions as groups
  seeds_min_hint_agreement                with route hints: the smallest held-out share copying the hint, over seeds
                                          and presets, after SFT (goal >= 0.9), and seeds_min_sft_agreement on the
                                          training tasks at SFT's last check
  seeds_sft_short                         seeds whose SFT stopped at sft.max_steps below its goal
  seeds_wall_s                            mean train_wall_s
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from statistics import mean
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PRESETS = ("accuracy-first", "balanced", "cost-first")
OWN = ("experiment", "seeds", "first", "root")


def train(experiment: str, seed: int, run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    summary = run_dir / "summary.json"
    if not summary.is_file():
        cmd = [sys.executable, "-m", "cluster.train", f"experiment={experiment}", f"seed={seed}",
               f"run_dir={run_dir}", *overrides]
        print(f"INFO seeds: {' '.join(cmd[2:])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(summary.read_text())


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


def describe_seed(seed: int, s: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """INFO lines for one seed's summary, and its figures for the RESULT lines."""
    from orchestra.eval.verdict import goals_of, sft_goal, verdict

    v = verdict(s, goals_of(cfg), sft_goal(cfg))
    sft, rl = s.get("after_sft") or {}, s.get("after_rl") or {}
    print(f"INFO seed {seed}: after SFT spread {sft.get('pref_spread', float('nan')):.2f} monotone "
          f"{sft.get('monotone', float('nan')):.0f}; after RL spread {rl.get('pref_spread', float('nan')):.2f} "
          f"monotone {rl.get('monotone', float('nan')):.0f}, unseen adherence "
          f"{s.get('heldout_unseen_adherence', float('nan')):.2f}, format_ok {rl.get('format_ok', float('nan')):.3f}; "
          f"follows {v.follows}" + (f" (lost in {v.lost_in})" if v.lost_in else "")
          + (f"; {v.sft_short}" if v.sft_short else "") + f"; SFT steps {s.get('sft_steps_done', 0)}")
    for tag, summ in (("after SFT", sft), ("after RL", rl), ("estimator router", s.get("router") or {})):
        by = summ.get("by_pref", {})
        if by:
            print(f"INFO seed {seed} {tag}: " + "; ".join(
                f"{p} acc {by[p]['accuracy']:.3f} ${by[p]['cost_usd']:.5f}" for p in PRESETS if p in by))
    if "hint_agreement_by_pref" in sft:
        print(f"INFO seed {seed} hint agreement after SFT: " + ", ".join(
            f"{p} {v:.0%}" for p, v in sft["hint_agreement_by_pref"].items()))
    points = (s.get("unseen_sweep") or {}).get("points") or []
    if points:
        print(f"INFO seed {seed} unseen sweep after RL: " + ", ".join(
            f"cost {p['cost_weight']:g} {100 * p['cost_usd']:.3f} ¢" for p in points))
    checks = s.get("sft_agreement_checks") or []
    return {"follows": v.follows, "sft_short": bool(v.sft_short), "spread": rl.get("pref_spread", float("nan")),
            "monotone": rl.get("monotone", float("nan")), "format_ok": rl.get("format_ok", float("nan")),
            "adherence": s.get("heldout_unseen_adherence", float("nan")),
            "sweep_ratio": sweep_ratio(points),
            "vs_est": s.get("heldout_vs_estimator", float("nan")),
            "vs_est_hi": s.get("heldout_vs_estimator_hi", float("nan")),
            "rl_gain_hi": s.get("heldout_reward_gain_hi", float("nan")),
            "hint": min(sft["hint_agreement_by_pref"].values()) if "hint_agreement_by_pref" in sft else None,
            "sft_agreement": min((v for k, v in checks[-1].items() if k.startswith("hint_")), default=None)
            if checks else None,
            "wall": s.get("train_wall_s", float("nan"))}


def sweep_ratio(points: list[dict[str, float]]) -> float:
    """$ at the sweep's lowest cost weight / $ at its second highest (nan with fewer than three points or no $)."""
    ranked = sorted(points, key=lambda p: p["cost_weight"])
    if len(ranked) < 3 or ranked[-2]["cost_usd"] <= 0:
        return float("nan")
    return ranked[0]["cost_usd"] / ranked[-2]["cost_usd"]


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


def main(argv: list[str]) -> None:
    from orchestra.config import load_config

    args = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in OWN)
    overrides = [a for a in argv if a.split("=", 1)[0] not in OWN]
    experiment = args.get("experiment", "cpu_tiny")
    first, n = int(args.get("first", 0)), int(args.get("seeds", 5))
    root = Path(args.get("root", ROOT / "runs" / "seeds")) / Path(experiment).stem
    cfg = load_config([f"experiment={experiment}", *overrides])
    runs = [train(experiment, s, root / f"s{s}", overrides) for s in range(first, first + n)]
    seeds = [describe_seed(s, r, cfg) for s, r in zip(range(first, first + n), runs, strict=True)]
    table(runs)
    nan = float("nan")
    out = {"seeds_n": float(n), "seeds_follows": float(sum(x["follows"] is True for x in seeds)),
           "seeds_min_pref_spread": min(x["spread"] for x in seeds),
           "seeds_all_monotone": float(all(x["monotone"] == 1 for x in seeds)),
           "seeds_min_unseen_adherence": min(x["adherence"] for x in seeds),
           "seeds_min_sweep_ratio": min(x["sweep_ratio"] for x in seeds),
           "seeds_min_format_ok": min(x["format_ok"] for x in seeds),
           "seeds_min_vs_estimator_hi": min(x["vs_est_hi"] for x in seeds),
           "seeds_max_abs_vs_estimator": max(abs(x["vs_est"]) for x in seeds),
           "seeds_min_rl_gain_hi": min(x["rl_gain_hi"] for x in seeds),
           "seeds_sft_short": float(sum(x["sft_short"] for x in seeds)),
           "seeds_wall_s": mean(x["wall"] for x in seeds)}
    if all(x["hint"] is not None for x in seeds):
        out["seeds_min_hint_agreement"] = min(x["hint"] for x in seeds)
    if all(x["sft_agreement"] is not None for x in seeds):
        out["seeds_min_sft_agreement"] = min(x["sft_agreement"] for x in seeds)
    gain = pooled(runs, "after_rl", "after_sft")
    out["seeds_rl_gain"], out["seeds_rl_gain_lo"], out["seeds_rl_gain_hi"] = (
        gain.get("diff", nan), gain.get("lo", nan), gain.get("hi", nan))
    if gain:
        print(f"INFO RL's gain over its warm start, {n} seeds pooled: {gain['diff']:+.4f} [{gain['lo']:+.4f}, "
              f"{gain['hi']:+.4f}] ({gain['n']:.0f} questions, a question's seeds and presets one draw)")
    # the worst seed's figure is what a user meets on a seed nobody chose; nan (min over nan) shows what was not
    # measured (eval.sweep off: no unseen adherence)
    for k, v in out.items():
        print(f"RESULT {k}={v:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
