"""What a training run shows while it runs: wall time per named phase of a step (`Phases`), progress bars with
elapsed time and ETA (`Bars`) and the one-line summaries printed per step (`describe`)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any


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


def describe(result: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items())
