"""RL's positive control through verl's own trainer on CPU (issue 51): bench/rl_control.py's experiment, trained by
verl 0.9.1 (FSDP world size 2 over gloo, our agent loop, tool-server actors, the scalar reward; rolled out by our HF
engine, `verl.rollout=cpuhf`) instead of the local learner: the path `make test-verl-cpu` runs for a few steps.

Usage: python bench/rl_control_verl.py [seeds=1] [root=runs/rl_control_verl] [KEY=VALUE ...]  (other KEY=VALUEs
are config overrides for the job, e.g. algo.steps=100)

Per seed: `python -m cluster.verl.job experiment=adaptive_control <VERL_CPU> seed=S run_dir=<root>/vS --here` (its
log: <root>/vS.log): the warm start as the job's first stage (<root>/vS/verl/policy), then GRPO paired over
accuracy-first and balanced, merged into <root>/vS/hf. Both policies are then scored by the local trainer's own
held-out evaluation (cluster/heldout.py: the same 200 greedy tasks under the three presets as
bench/rl_control.py's runs, escalation rates included): `cluster.train` with model.name=<policy> and no SFT or RL
step (<root>/vS/eval_sft, <root>/vS/eval_rl). A dir that already holds its result is read, not run again.
Differences from the local run, each forced by the backend: verl's GRPO takes no per-vector advantage balancing
(algo.balance_prefs, refused on verl); the job's own validation runs one preset (eval.presets, refused above one);
KL is verl's loss term of the same type and coefficient.
RESULT lines: bench/rl_control.py's held-out figures prefixed `verl_` (verl_rl_control_escalation_gain, the rise of
P(esc | disagree) - P(esc | agree) under accuracy-first through RL, goal >= 0.5; verl_rl_control_gain_ci_low, goal
> 0; per preset the gains and escalation rates), and verl_rl_control_step_s (mean seconds per GRPO step after the
first), verl_rl_control_steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from statistics import mean

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from rl_control import compare  # noqa: E402
from verl_cpu import ENV, mean_after_first, step_lines  # noqa: E402

# verl's CPU settings as CI runs them (conf/experiment/verl_cpu_tiny.yaml: backend, engine, rollout workers, the verl
# block), read from that preset rather than restated, on the control's preset (experiment=adaptive_control)
_TINY = yaml.safe_load((ROOT / "conf" / "experiment" / "verl_cpu_tiny.yaml").read_text())
VERL_CPU = [f"backend={_TINY['defaults']['backend']}", f"engine.kind={_TINY['engine']['kind']}",
            f"cluster.num_rollout_workers={_TINY['cluster']['num_rollout_workers']}", "checkpoint.keep=2",
            *(f"verl.{k}={json.dumps(v)}" for k, v in _TINY["verl"].items()),
            # the whole job's deadline, not a stall detector: 200 steps took ~55 min here (900 s ended the first try)
            "verl.watchdog_s=14400",
            # refused by the verl backend (module docstring)
            "algo.balance_prefs=false", "eval.presets=[accuracy-first]",
            # 4 tasks x 2 vectors = 8 prompts per step, half the local preset's 8 x 2, and 200 steps, not 300: what
            # fitted the session that measured it (12-24 s per step on 2 cores; docs/quality.md). It was launched
            # before verl read prompts_per_step as tasks (cluster/verl/config.rows_per_step), as 8 prompts
            "algo.prompts_per_step=4", "algo.steps=200"]


def train(seed: int, run_dir: Path, overrides: list[str]) -> dict[str, float]:
    """The verl job (unless its merged policy exists); {step_s, steps} from its log's step lines."""
    log = run_dir.parent / f"{run_dir.name}.log"
    if not (run_dir / "hf" / "config.json").is_file():
        cmd = [sys.executable, "-m", "cluster.verl.job", "experiment=adaptive_control", *VERL_CPU, f"seed={seed}",
               f"run_dir={run_dir.resolve()}", *overrides, "--here"]
        print(f"INFO rl_control_verl: {' '.join(cmd[2:])} (log {log})", flush=True)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as f:
            subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **ENV}, check=True)
    steps = step_lines(log.read_text(errors="replace"))
    return {"step_s": mean_after_first(steps), "steps": float(len(steps))}


def held_out(policy: Path, seed: int, out: Path, overrides: list[str]) -> dict:
    """The local trainer's held-out evaluation of `policy` (an HF dir): cluster.train with no SFT or RL step, so
    its summary's after_rl is that policy's greedy held-out summary (cluster/heldout.summary)."""
    summary = out / "summary.json"
    if not summary.is_file():
        keep = [o for o in overrides if o.split("=", 1)[0].startswith(("data.", "zoo.", "reward.", "agent."))]
        cmd = [sys.executable, "-m", "cluster.train", "experiment=adaptive_control", f"seed={seed}",
               f"run_dir={out}", f"model.name={policy.resolve()}", "sft.steps=0", "algo.steps=0", *keep]
        print(f"INFO rl_control_verl: {' '.join(cmd[2:])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return json.loads(summary.read_text())["after_rl"]


def main(argv: list[str]) -> None:
    own = ("seeds", "root")
    args = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in own)
    overrides = [a for a in argv if a.split("=", 1)[0] not in own]
    root = Path(args.get("root", ROOT / "runs" / "rl_control_verl"))
    runs, timing = [], []
    for s in range(int(args.get("seeds", 1))):
        run = root / f"v{s}"
        timing.append(train(s, run, overrides))
        runs.append((held_out(run / "verl" / "policy", s, run / "eval_sft", overrides),
                     held_out(run / "hf", s, run / "eval_rl", overrides)))
        print(f"INFO v{s}: {timing[-1]['steps']:.0f} GRPO steps logged, {timing[-1]['step_s']:.1f} s per step")
    out = {f"verl_{k}": v for k, v in compare(runs).items()}
    out["verl_rl_control_step_s"] = mean(t["step_s"] for t in timing)
    out["verl_rl_control_steps"] = mean(t["steps"] for t in timing)
    for k, v in out.items():
        print(f"RESULT {k}={v:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
