"""Training driver: `python -m cluster.train [experiment=NAME] [key=value ...] [--print-config]`.

Runs as a plain process or under `ray job submit --working-dir . -- python -m cluster.train ...`. It composes
the config (orchestra/config/), attaches to a Ray cluster or starts a local one (cluster/launch.py), builds
the task set, and then runs, as flat named and timed phases:
  SFT warm start (first run only) -> held-out eval ->
  per step: sample tasks -> rollouts (rewards stream per group) -> advantages -> episode records
            (cluster/replay.py) -> update -> weight sync
            -> (eval) -> checkpoint -> log
  -> final held-out eval, plots, summary.
A run directory that already holds a good checkpoint is resumed from it (same task order; at most the step
in flight is lost). `backend=verl` hands over to cluster/verl_job.py.
"""

from __future__ import annotations

import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from orchestra.config import ConfigError, ExperimentConfig, load_config, to_yaml


class Phases:
    """Wall time per named phase of the current step."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - start

    def pop(self) -> dict[str, float]:
        out, self.times = self.times, {}
        return out


class Bars:
    """Progress bars with elapsed time and ETA, one per phase (SFT steps, RL steps, each evaluation's episodes),
    drawn under the run's console lines; off a terminal rich draws them once, at the end."""

    def __init__(self, console: Any) -> None:
        from rich import progress as p

        self.progress = p.Progress(p.TextColumn("{task.description:<14}"), p.BarColumn(), p.MofNCompleteColumn(),
                                   p.TimeElapsedColumn(), p.TextColumn("eta"), p.TimeRemainingColumn(),
                                   console=console)

    def __enter__(self) -> Bars:
        self.progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.stop()

    def add(self, name: str, total: int, completed: int = 0) -> Any:
        return self.progress.add_task(name, total=max(total, 1), completed=completed)

    def advance(self, bar: Any, n: int = 1) -> None:
        self.progress.advance(bar, n)

    def set(self, bar: Any, completed: int) -> None:
        self.progress.update(bar, completed=completed)

    def remove(self, bar: Any) -> None:
        self.progress.remove_task(bar)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    print_only = "--print-config" in argv
    overrides = [a for a in argv if a != "--print-config"]
    try:
        cfg = load_config(overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    if print_only:
        print(to_yaml(cfg))
        return 0
    if shutil.which("bwrap") is None:  # the sandbox still isolates, less well: say so before minutes of work
        print("warning: bubblewrap is not installed, so model-written code runs under the weaker `unshare` + "
              "rlimits sandbox; install it: apt-get install -y bubblewrap", file=sys.stderr)
    if cfg.backend == "verl":
        from cluster.verl_job import main as verl_main

        return verl_main(overrides)
    from cluster.trainer import Trainer

    trainer = Trainer(cfg)
    try:
        summary = trainer.fit()
    finally:
        trainer.close()
    for name in ("heldout_reward_gain", "train_wall_s"):
        if name in summary:
            print(f"RESULT {name}={summary[name]:.4f}")
    return 0


def run_dir(cfg: ExperimentConfig) -> Path:
    return Path(cfg.run_dir).expanduser().resolve()


def describe(result: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items())


if __name__ == "__main__":
    sys.exit(main())
