"""RL's positive control (issue 51): does preference-paired GRPO teach the tiny policy to read what its experts say?

Usage: python bench/rl_control.py [seeds=2] [root=runs/rl_control] [KEY=VALUE ...]  (other KEY=VALUEs are passed to
cluster.train as config overrides, e.g. algo.steps=60 algo.lr=2e-4)

Trains experiment=adaptive_control (conf/experiment/adaptive_control.yaml) once per seed: a warm start that consults
two cheap simulated experts and escalates to gpt-5 at random (not on what they answered), then GRPO paired over
accuracy-first and cost-first. From each run's held-out evaluations after SFT and after RL (greedy, the same 200
tasks; cluster/heldout.py `escalation`) it prints per preset
P(escalate | the two answers disagree) and P(escalate | they agree) before and after RL, and the held-out reward's
change with a paired bootstrap 95 % interval (questions paired, seeds pooled, orchestra/eval/stats.py). RESULT lines:
  rl_control_escalation_gain   under accuracy-first, the rise of P(esc | disagree) - P(esc | agree) through RL
                               (mean over seeds); the goal is >= 0.5
  rl_control_gain_ci_low       the low end of accuracy-first's reward-gain interval (goal: > 0)
  rl_control_gain_<preset>, escalation_disagree_<preset>, escalation_agree_<preset> (after RL), and _sft twins
A run dir that already holds a summary is read, not trained again (delete it to rerun).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from statistics import mean

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PRESETS = ("accuracy-first", "balanced", "cost-first")


def train(seed: int, run_dir: Path, overrides: list[str]) -> dict:
    summary = run_dir / "summary.json"
    if not summary.is_file():
        cmd = [sys.executable, "-m", "cluster.train", "experiment=adaptive_control", f"seed={seed}",
               f"run_dir={run_dir}", *overrides]
        print(f"INFO rl_control: {' '.join(cmd[2:])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(summary.read_text())


def rates(summary: dict, preset: str) -> tuple[float, float]:
    b = summary["by_pref"][preset]
    return float(b.get("escalation_disagree", float("nan"))), float(b.get("escalation_agree", float("nan")))


def main(argv: list[str]) -> None:
    from orchestra.eval.stats import paired_bootstrap_diff

    args = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in ("seeds", "root"))
    overrides = [a for a in argv if a.split("=", 1)[0] not in ("seeds", "root")]
    root = Path(args.get("root", ROOT / "runs" / "rl_control"))
    runs = [train(s, root / f"s{s}", overrides) for s in range(int(args.get("seeds", 2)))]
    out: dict[str, float] = {}
    for p in PRESETS:
        before = [rates(r["after_sft"], p) for r in runs]
        after = [rates(r["after_rl"], p) for r in runs]
        for s, (b, a) in enumerate(zip(before, after, strict=True)):
            print(f"INFO seed {s} {p}: P(esc|disagree) {b[0]:.3f} -> {a[0]:.3f}, P(esc|agree) {b[1]:.3f} -> {a[1]:.3f}")
        x, y, groups = [], [], []
        for s, r in enumerate(runs):  # rewards paired per (seed, question), seeds pooled
            pre = {(e["task"]): e["reward"] for e in r["after_sft"]["rewards"] if e["pref"] == p}
            post = {(e["task"]): e["reward"] for e in r["after_rl"]["rewards"] if e["pref"] == p}
            for t in sorted(set(pre) & set(post)):
                x.append(post[t])
                y.append(pre[t])
                groups.append(f"{s}:{t}")
        gain = paired_bootstrap_diff(x, y, groups)
        print(f"INFO {p}: held-out reward after RL - after SFT {gain['diff']:+.4f} [{gain['lo']:+.4f}, "
              f"{gain['hi']:+.4f}] ({len(x)} question-runs)")
        key = p.replace("-", "_")
        out[f"rl_control_gain_{key}"] = gain["diff"]
        out[f"rl_control_gain_{key}_ci_low"] = gain["lo"]
        out[f"escalation_disagree_{key}"] = mean(a[0] for a in after)
        out[f"escalation_agree_{key}"] = mean(a[1] for a in after)
        out[f"escalation_disagree_{key}_sft"] = mean(b[0] for b in before)
        out[f"escalation_agree_{key}_sft"] = mean(b[1] for b in before)
        if p == "accuracy-first":
            out["rl_control_escalation_gain"] = mean((a[0] - a[1]) - (b[0] - b[1]) for a, b in zip(after, before))
            out["rl_control_gain_ci_low"] = gain["lo"]
    for k, v in out.items():
        print(f"RESULT {k}={v:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
