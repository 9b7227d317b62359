"""A finished run judged on another held-out draw: `python -m cluster.redraw RUN_DIR [heldout_seed=null] [n=64]`.

The run's kept policy (its newest good checkpoint: after RL's gate, RL's policy or the warm start) and its estimator
router play the held-out tasks of draw `heldout_seed` (data.heldout_seed; `null`: the draw every run before issue 69
was scored on) under accuracy-first, balanced and cost-first and under the unseen sweep, greedily, through
cluster/evaluate.py's wiring in this process; the verdict (orchestra/eval/verdict.py) judges them as it judged the
run's own draw, on the after-RL figures (a redraw has no warm-start evaluation, so the phase is not named). It
prints the judged figures and `RESULT redraw_*` lines and writes `<run_dir>/redraw_<draw>/summary.json`.
Continuity, not a second test set: bench/seeds.py (`redraw=null`) reports it beside the run's own draw.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from statistics import mean
from typing import Any

OWN = ("heldout_seed", "n")


def evaluation(records: list[dict[str, Any]], policy: str, presets: list[str]) -> dict[str, Any]:
    """{by_pref: {preset: accuracy, cost_usd}}, the sweep's {points, adherence}: one policy's records."""
    from orchestra.eval.adherence import PREFIX, adherence, sweep_points, task_costs

    per_task = task_costs(records, policy)
    by_pref = {}
    for p in presets:
        rs = [r for r in records if r["policy"] == policy and r["preference"] == p]
        if rs:
            by_pref[p] = {"accuracy": mean(float(r["correct"]) for r in rs),
                          "cost_usd": mean(float(r["cost_usd"]) for r in rs), "episodes": len(rs),
                          "task_usd": per_task[p]}
    points = sweep_points(records, policy)
    return {"by_pref": by_pref, "sweep": {"adherence": adherence(points),
                                          "points": [{"cost_weight": w, "cost_usd": c, "accuracy": a,
                                                      "task_usd": per_task[f"{PREFIX}{w:g}"]}
                                                     for w, c, a in points]}}


def redraw(run_dir: Path, heldout_seed: int | None, n: int | None = None) -> dict[str, Any]:
    """The run's policy and router on draw `heldout_seed`: a summary shaped as the trainer's (after_rl, unseen_sweep,
    router with its sweep), with `verdict` (follows, judged, problems) added."""
    from cluster.evaluate import build
    from cluster.heldout import sweep_read_as_trained, unseen_sweep
    from orchestra.config import load_config
    from orchestra.data.tasks import load_tasks
    from orchestra.eval.verdict import goals_of, verdict
    from orchestra.preferences import COST_ORDER, preset

    run_dir = Path(run_dir).resolve()
    tag = "null" if heldout_seed is None else str(heldout_seed)
    cfg = load_config([f"experiment={run_dir / 'config.yaml'}", f"data.heldout_seed={tag}", f"run_dir={run_dir}"])
    own = {"checkpoint": str(run_dir), "preference": cfg.eval.preference, "seeds": "1", "baselines": "",
           "n": str(n or cfg.eval.n_tasks), "out": str(run_dir / f"redraw_{tag}")}
    ev, tasks, policies, _, seeds, out = build(cfg, own)
    train = load_tasks(run_dir / "data" / "train.jsonl")
    prefs = {p: preset(p) for p in COST_ORDER} | unseen_sweep(cfg, train)
    records = asyncio.run(ev.run(tasks, policies, prefs, seeds, pref_policies=tuple(policies)))
    mine, theirs = (evaluation(records, p, list(COST_ORDER)) for p in ("orchestrator", "estimator"))
    summary = {"heldout_seed": heldout_seed, "tasks": len(tasks), "after_rl": {"by_pref": mine["by_pref"]},
               "unseen_sweep": mine["sweep"], "router": {"by_pref": theirs["by_pref"], "sweep": theirs["sweep"]},
               "heldout_sweep_read_as_trained": len(sweep_read_as_trained(cfg, train))}
    v = verdict(summary, goals_of(cfg))
    summary["verdict"] = {"follows": v.follows, "judged": v.judged, "problems": v.problems}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    return summary


def lines(summary: dict[str, Any]) -> list[str]:
    """INFO lines of what was judged, and RESULT redraw_* lines."""
    v = summary["verdict"]
    by = summary["after_rl"]["by_pref"]
    out = [f"INFO redraw (held-out draw {summary['heldout_seed']}, {summary['tasks']} tasks) judged {line}"
           for line in v["judged"]]
    out += [f"INFO redraw: {p}" for p in v["problems"]]
    if by.get("accuracy-first") and by.get("cost-first", {}).get("cost_usd"):
        out.append(f"RESULT redraw_pref_spread={by['accuracy-first']['cost_usd'] / by['cost-first']['cost_usd']:.4f}")
    out.append(f"RESULT redraw_unseen_adherence={summary['unseen_sweep']['adherence']:.4f}")
    out.append("RESULT redraw_follows_preference=" + ("nan" if v["follows"] is None else str(int(v["follows"]))))
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    runs = [a for a in argv if "=" not in a]
    args = dict(a.split("=", 1) for a in argv if "=" in a and a.split("=", 1)[0] in OWN)
    if len(runs) != 1:
        print("usage: python -m cluster.redraw RUN_DIR [heldout_seed=null] [n=64]", file=sys.stderr)
        return 2
    seed = args.get("heldout_seed", "null")
    summary = redraw(Path(runs[0]), None if seed in ("null", "None", "") else int(seed),
                     int(args["n"]) if "n" in args else None)
    for line in lines(summary):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
