"""Orchestration quality: the trained orchestrator vs fixed routers on held-out tasks.

`python bench/quality.py [replay_run=DIR] [sim_run=DIR] [train=true] [n=100] [seeds=2] [only=replay|sim]`

For each setting — the MMLU-Pro replay preset (experiment=mmlu_pro_replay: six real models' recorded
outcomes; figures `quality_*`) and the embedded default (experiment=cpu_tiny, simulated zoo; `sim_quality_*`)
— it takes the newest good checkpoint in the run directory (default runs/<experiment name>), training one
first with `python -m cluster.train` when there is none and train=true (the default), then evaluates it
under the accuracy-first / balanced / cost-first / latency-first presets beside the baselines
(cluster/evaluate.py) and prints:
  RESULT quality_acc_gap=...       always-strongest accuracy − orchestrator (balanced) accuracy, points
  RESULT quality_cost_ratio=...    orchestrator (balanced) $ ÷ always-strongest $
  RESULT quality_on_frontier=1|0   orchestrator (balanced) on or above the fixed routers' frontier
  RESULT quality_monotone=1|0      $ falls as the cost weight rises (accuracy-first >= balanced >= cost-first)
Reports (JSON, markdown, plots) land in <run dir>/quality/. Goal (issue 6): gap <= 2 points at ratio <= 0.35.
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
    from orchestra import checkpoint

    return (run_dir / "checkpoints").is_dir() and checkpoint.latest_good(run_dir) is not None


def figures(experiment: str, run_dir: Path, n: int, seeds: int, train: bool) -> dict[str, float] | None:
    from cluster.evaluate import build
    from orchestra.config import load_config
    from orchestra.evaluate import write_report

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
    report = write_report(records, out, meta={"experiment": experiment, "seeds": seed_list, "n_tasks": len(tasks)})
    print((out / "report.md").read_text(), flush=True)
    return report.get("quality")


def main(argv: list[str]) -> int:
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    n, seeds = int(args.get("n", 100)), int(args.get("seeds", 2))
    train = args.get("train", "true").lower() == "true"
    chosen = [args["only"]] if "only" in args else list(SETTINGS)
    for key in chosen:
        experiment, prefix = SETTINGS[key]
        run_dir = Path(args.get(f"{key}_run") or ROOT / "runs" / experiment).resolve()
        q = figures(experiment, run_dir, n, seeds, train)
        if q is None:
            continue
        for name in ("acc_gap", "cost_ratio", "on_frontier", "monotone"):
            if name in q:
                print(f"RESULT {prefix}{name}={q[name]:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
