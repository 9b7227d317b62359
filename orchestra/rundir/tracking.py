"""Run tracking: JSONL metrics (the source of truth), TensorBoard, W&B when WANDB_API_KEY is set, and a rich
console line per step. Plots are drawn from the JSONL afterwards (orchestra/eval/plots.py).

Secrets never pass through here: only numeric metrics and the resolved config (which holds env-var *names*,
never keys) are written.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from orchestra.jsonl import JsonlWriter, read_jsonl

log = logging.getLogger(__name__)


def _scalars(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_scalars(value, name + "/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


class Tracker:
    def __init__(self, run_dir: str | Path, tensorboard: bool = True, wandb_project: str = "",
                 config: dict[str, Any] | None = None, resume: bool = False):
        self.dir = Path(run_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "metrics.jsonl"
        self._file = JsonlWriter(self.path, append=resume, default=float)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.dir / "tensorboard"))
            except Exception as e:  # tensorboard missing or broken: say so, keep JSONL
                log.warning("TensorBoard disabled: %s", e)
        self._wandb = None
        if wandb_project and os.environ.get("WANDB_API_KEY"):
            try:
                import wandb

                self._wandb = wandb.init(project=wandb_project, dir=str(self.dir), config=config or {},
                                         resume="allow", name=self.dir.name)
            except Exception as e:
                log.warning("W&B disabled: %s", e)

    def log(self, step: int, metrics: dict[str, Any], kind: str = "train") -> None:
        record = {"step": step, "kind": kind, **metrics}
        self._file.write(record)  # a whole line, flushed
        flat = _scalars(metrics, f"{kind}/")
        if self._tb is not None:
            for key, value in flat.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(flat, step=step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl; on resume a step may appear twice: the last record of a step wins.
    A torn last line (a crash mid-write) is skipped."""
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in read_jsonl(path, skip_bad=True):
        if isinstance(rec, dict) and "step" in rec:
            if kind is None or rec.get("kind") == kind:
                by_key[(rec.get("kind", ""), rec["step"])] = rec
    return sorted(by_key.values(), key=lambda r: (r["step"], r.get("kind", "")))
