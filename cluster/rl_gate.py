"""RL that cannot harm, by mechanism: after RL the run keeps the RL policy only if it is significantly better than its
warm start on a validation split of *training* tasks (`algo.keep_rl: better`), or only if it is not significantly
worse (`not_worse`), else it goes back to the warm start.

The split (`algo.val_share`) is the last training tasks: the warm start was trained on them as on every training
task, RL never samples them (cluster/rollouts.TaskSampler gets the others), and SFT's own check reads the first
`eval.n_tasks` (cluster/sft_check.py), so no decision of the run reads a held-out task and none reads a task twice.
Both policies are played greedily on the split under the eval presets; the difference of their `scalar` scores gets
the paired bootstrap 95 % interval the held-out gain gets (cluster/heldout.paired_gain: per (preset, task), a
task's presets resampled together). `better` keeps RL where the interval's lower end is above 0, `not_worse` unless
its upper end is below 0: the second kept a significant held-out harm on one seed of four on cpu_tiny (64
validation tasks do not see a difference of 0.005), so cpu_tiny asks the first. What RL would have done
on held-out tasks is then not measured when it is not kept: the held-out figures are the kept policy's (the warm
start's own, taken after SFT with the same greedy episodes).
The warm start's learner state is copied out of its step-0 checkpoint (`<run_dir>/warm_start/`), since checkpoints
are pruned as RL goes; going back loads it into the learner and republishes the last step's checkpoint with it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import ray

from cluster.heldout import paired_gain
from orchestra.config.training import KEEP_RL
from orchestra.types import Task

WARM_START_DIR = "warm_start"


def split(train: list[Task], share: float) -> tuple[list[Task], list[Task]]:
    """(the tasks RL samples, the validation split: the last round(share x n), at least one, never all); share 0 or
    fewer than two tasks: (train, [])."""
    if share <= 0 or len(train) < 2:
        return train, []
    n = min(max(1, round(share * len(train))), len(train) - 1)
    return train[:-n], train[-n:]


def keep_warm_start(checkpoint: Path, run_dir: Path) -> Path:
    """Copy the step-0 checkpoint's learner state (the warm start) to `<run_dir>/warm_start/`."""
    out = Path(run_dir) / WARM_START_DIR
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(Path(checkpoint) / "learner", tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def decide(val_rl: dict[str, Any], val_sft: dict[str, Any], keep: str = "not_worse") -> dict[str, Any]:
    """{"rl_kept": 1 | 0, "val_rl_gain", "_lo", "_hi", "line"}: on the validation split, RL kept where significantly
    better than its warm start (`keep` "better": the paired interval's lower end > 0), or unless significantly worse
    ("not_worse": its upper end < 0); kept, and said so, when nothing pairs."""
    if keep not in KEEP_RL:
        raise ValueError(f"algo.keep_rl must be one of {KEEP_RL}, got {keep!r}")
    gain = paired_gain(val_rl, val_sft)
    if not gain:
        return {"rl_kept": 1, "line": "RL kept: no validation episodes to compare it with its warm start on"}
    kept = gain["lo"] > 0 if keep == "better" else gain["hi"] >= 0
    interval = f"{gain['diff']:+.4f} [{gain['lo']:+.4f}, {gain['hi']:+.4f}]"
    why = {("better", True): "RL kept (significantly better)",
           ("better", False): "RL is not significantly better (algo.keep_rl=better): the warm start is kept, its "
                              "held-out figures reported",
           ("not_worse", True): "RL kept (not significantly worse)",
           ("not_worse", False): "RL is significantly worse: the warm start is kept, its held-out figures reported"}
    return {"rl_kept": int(kept), "val_rl_gain": gain["diff"], "val_rl_gain_lo": gain["lo"],
            "val_rl_gain_hi": gain["hi"],
            "line": (f"validation (training tasks RL never sampled, {gain['tasks']:.0f} x {gain['presets']} presets): "
                     f"RL minus its warm start {interval}: " + why[keep, kept])}


def reverted(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's held-out figures for the kept warm start: after RL := after SFT (the same weights, the same greedy
    episodes), the unseen sweep := the warm start's."""
    out = dict(summary)
    out["after_rl"] = dict(summary["after_sft"])
    if summary.get("sft_unseen_sweep"):
        out["unseen_sweep"] = dict(summary["sft_unseen_sweep"])
    return out


def gate(trainer: Any, summary: dict[str, Any]) -> bool:
    """After RL (cluster/trainer.py): the RL policy on the validation split beside the warm start's figures taken
    after SFT (`val_sft`), the decision (`decide`, its figures into `summary`), and where RL is not kept, the warm
    start loaded back into the learner, synced to the workers and saved as the last step's checkpoint. True: RL kept
    (or no validation split: algo.val_share=0)."""
    if not trainer.val or "val_sft" not in summary:
        return True
    summary["val_rl"] = trainer.evaluate("val_rl", tasks=trainer.val)
    found = decide(summary["val_rl"], summary["val_sft"], trainer.cfg.algo.keep_rl)
    trainer.console.print(found.pop("line"))
    summary.update(found)
    if not found["rl_kept"]:
        ray.get(trainer.learner.load.remote(str(trainer.dir / WARM_START_DIR)))
        trainer.sync_weights()
        trainer.save(trainer.cfg.algo.steps, reverted(summary))
    return bool(found["rl_kept"])
