"""Does RL earn its place? Two recipes side by side, held-out score against the expert $ each spent training.

`python bench/rl_value.py [experiment=cpu_tiny] [seeds=2] [partial=0.25] [runs=runs/rl_value] [KEY=VALUE ...]`

The expected-value warm start explores exhaustively: every plan on every training task (`router.explore_tasks=0`),
which with real experts is the training bill (plans × tasks expert calls). Per seed this trains:
  exhaustive   the experiment as configured (exhaustive exploration, warm start, then RL);
  partial      exploration on `partial` × the training tasks only (router.explore_tasks), the same warm start
               recipe on those, then the same RL, which plays the rest of the training tasks itself.
Extra KEY=VALUE pairs are config overrides given to both. Runs already finished (a summary.json in
<runs>/<recipe>_s<seed>) are reused, so a second call only prints. Expert $ is read from each run's records:
exploration episodes (<run>/router/explore.jsonl) and RL's training rollouts (kind "train" in the episode log).
Every difference is a paired bootstrap 95 % interval over held-out tasks (cluster/heldout.paired_gain: paired per
(seed, preset, task), a task's seeds and presets resampled together). It prints

  RESULT rl_gain=...                 exhaustive: after RL − after the warm start (mean over seeds)
  RESULT rl_gain_ci_low=...          its interval's lower end: RL helped beyond chance when > 0
  RESULT rl_partial_vs_warm_start=...  partial after RL − exhaustive after the warm start
  RESULT rl_partial_vs_warm_start_ci_low=...
  RESULT rl_spend_ratio=...          partial's expert $ (exploration + RL) ÷ exhaustive's exploration $
  RESULT rl_partial_warm_vs_warm_start=...  partial's warm start alone − exhaustive's warm start

with INFO lines per recipe and seed, and a plot of score vs expert $ (<runs>/rl_value.png). The issue's bar: RL
earns its place if rl_gain_ci_low > 0, or if partial reaches the exhaustive warm start's score
(rl_partial_vs_warm_start's interval reaching 0 or above) for rl_spend_ratio ≤ 1/3.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def spend(run: Path) -> dict[str, float]:
    """Expert $ of a finished run: exploration, and RL's training rollouts (evaluations excluded)."""
    from orchestra.rundir.records import episodes_dir

    explore = run / "router" / "explore.jsonl"
    out = {"explore_usd": sum(json.loads(line).get("cost_usd", 0.0) for line in explore.read_text().splitlines()
                              if line.strip()) if explore.is_file() else 0.0, "rl_usd": 0.0}
    for f in sorted(episodes_dir(run).glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                if rec.get("kind") == "train":
                    out["rl_usd"] += float(rec.get("cost_usd") or 0.0)
    return out


def train(run: Path, experiment: str, seed: int, overrides: list[str]) -> dict[str, Any]:
    if not (run / "summary.json").is_file():
        print(f"[rl_value] training {run.name} ...", flush=True)
        subprocess.run([sys.executable, "-m", "cluster.train", f"experiment={experiment}", f"seed={seed}",
                        f"run_dir={run}", *overrides], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads((run / "summary.json").read_text())


def pooled(summaries: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """One `rewards` list over seeds, the seed joined to the preset, so seeds pair with themselves."""
    return {"rewards": [{**r, "pref": f"{s}/{r['pref']}"} for s, summary in enumerate(summaries)
                        for r in summary[key].get("rewards", [])]}


def plot(points: dict[str, list[tuple[float, float, str]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (recipe, pts), marker in zip(points.items(), ("o", "s"), strict=False):
        for usd, score, stage in pts:
            ax.scatter(usd, score, marker=marker, color="C0" if stage == "warm start" else "C1",
                       label=f"{recipe}, {stage}")
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    ax.legend(seen.values(), seen.keys(), fontsize=8)
    ax.set_xlabel("expert $ spent training (exploration + RL rollouts)")
    ax.set_ylabel("held-out score (mean over presets)")
    ax.set_title("score vs training spend, per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str]) -> int:
    from cluster.heldout import paired_gain
    from orchestra.config import load_config

    args = dict(a.split("=", 1) for a in argv if "=" in a)
    experiment = args.pop("experiment", "cpu_tiny")
    seeds, partial = int(args.pop("seeds", 2)), float(args.pop("partial", 0.25))
    runs = Path(args.pop("runs", ROOT / "runs" / "rl_value")).resolve()
    overrides = [f"{k}={v}" for k, v in args.items()]
    n_train = load_config([f"experiment={experiment}", *overrides]).data.n_train
    k = max(1, round(partial * n_train))
    recipes = {"exhaustive": [], "partial": [f"router.explore_tasks={k}"]}
    results: dict[str, list[dict[str, Any]]] = {r: [] for r in recipes}
    costs: dict[str, list[dict[str, float]]] = {r: [] for r in recipes}
    for seed in range(seeds):
        for recipe, extra in recipes.items():
            run = runs / f"{recipe}_s{seed}"
            results[recipe].append(train(run, experiment, seed, [*overrides, *extra]))
            costs[recipe].append(spend(run))
            s, c = results[recipe][-1], costs[recipe][-1]
            print(f"INFO {recipe} seed {seed}: warm start {s['after_sft']['score']:.4f}, after RL "
                  f"{s['after_rl']['score']:.4f}; explored {s.get('explore_episodes', 0)} episodes for "
                  f"${c['explore_usd']:.4f}, RL rollouts ${c['rl_usd']:.4f}", flush=True)
    ex, pa = results["exhaustive"], results["partial"]
    gain = paired_gain(pooled(ex, "after_rl"), pooled(ex, "after_sft"))
    reach = paired_gain(pooled(pa, "after_rl"), pooled(ex, "after_sft"))
    warm = paired_gain(pooled(pa, "after_sft"), pooled(ex, "after_sft"))
    ex_usd = sum(c["explore_usd"] for c in costs["exhaustive"])
    pa_usd = sum(c["explore_usd"] + c["rl_usd"] for c in costs["partial"])
    for name, g in (("rl_gain", gain), ("rl_partial_vs_warm_start", reach), ("rl_partial_warm_vs_warm_start", warm)):
        print(f"INFO {name}: {g['diff']:+.4f} [{g['lo']:+.4f}, {g['hi']:+.4f}] (paired bootstrap 95 %, "
              f"{g['tasks']:.0f} tasks x {g['presets']} seed/preset pairs)")
    print(f"RESULT rl_gain={gain['diff']:.4f}")
    print(f"RESULT rl_gain_ci_low={gain['lo']:.4f}")
    print(f"RESULT rl_partial_vs_warm_start={reach['diff']:.4f}")
    print(f"RESULT rl_partial_vs_warm_start_ci_low={reach['lo']:.4f}")
    print(f"RESULT rl_partial_warm_vs_warm_start={warm['diff']:.4f}")
    print(f"RESULT rl_spend_ratio={pa_usd / ex_usd if ex_usd > 0 else float('nan'):.4f}")
    points = {recipe: [pt for s, c in zip(results[recipe], costs[recipe], strict=True)
                       for pt in ((c["explore_usd"], s["after_sft"]["score"], "warm start"),
                                  (c["explore_usd"] + c["rl_usd"], s["after_rl"]["score"], "after RL"))]
              for recipe in recipes}
    plot(points, runs / "rl_value.png")
    print(f"INFO plot: {runs / 'rl_value.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
