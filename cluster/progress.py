"""What a training run shows while it runs: wall time per named phase of a step (`Phases`), progress bars with
elapsed time and ETA (`Bars`), the one-line summaries printed per step (`describe`, `headline`) and the end of
run's lines (rollout engines' counters, held-out figures per task family)."""

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


def headline(m: dict[str, Any]) -> dict[str, Any]:
    """The few figures a step's or an evaluation's console line shows."""
    keys = ("score", "reward", "accuracy", "cost_usd", "latency_s", "format_ok")
    return {k: float(m[k]) for k in keys if k in m}


ENGINE_COUNTERS = ("batches", "joins", "rows", "tokens_generated", "prompt_tokens", "reused_prefix_tokens", "busy_s",
                   "queue_wait_s", "tool_calls_asked", "tool_calls_made")


def engine_totals(per_worker: list[dict[str, Any]]) -> dict[str, float]:
    """The rollout engines' counters summed over workers; empty for engines that keep none (vLLM, scripted)."""
    tot = {k: float(sum(p.get(k, 0) for p in per_worker)) for k in ENGINE_COUNTERS}
    return tot if tot["batches"] else {}


def engine_line(tot: dict[str, float]) -> str:
    return (f"rollout engines: {tot['batches']:.0f} batches + {tot['joins']:.0f} joins of queued requests into "
            f"running ones, mean {tot['rows'] / (tot['batches'] + tot['joins']):.1f} rows each, busy "
            f"{tot['busy_s']:.0f} s at {tot['tokens_generated'] / max(tot['busy_s'], 1e-9):.0f} generated tok/s, "
            f"{tot['reused_prefix_tokens'] / max(tot['prompt_tokens'], 1):.0%} of prompt tokens reused from kept KV "
            f"caches, mean wait for a batch {1000 * tot['queue_wait_s'] / tot['rows']:.0f} ms per request"
            + (f"; tool calls {tot['tool_calls_asked']:.0f} asked, {tot['tool_calls_made']:.0f} made (the rest "
               "replayed: zoo.server.client_replay)" if tot.get("tool_calls_asked") else ""))


def family_lines(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per task family: held-out score, accuracy and $ before -> after RL."""
    lines = []
    for fam, a in after.get("by_family", {}).items():
        b = before.get("by_family", {}).get(fam, {})
        change = {k: (f"{b[k]:.3g} -> " if k in b else "") + f"{a[k]:.3g}" for k in ("score", "accuracy", "cost_usd")}
        lines.append(f"  {fam} ({a['episodes']} episodes): score {change['score']}, accuracy {change['accuracy']}, "
                     f"$ {change['cost_usd']}")
    return lines


def preset_lines(before: dict[str, Any], after: dict[str, Any], router: dict[str, Any]) -> list[str]:
    """With several held-out presets: one line per preset, score / accuracy / $ after SFT -> after RL, and the
    estimator router's beside them."""
    if len(after.get("by_pref", {})) < 2:
        return []
    lines = []
    for name, a in after["by_pref"].items():
        b = before.get("by_pref", {}).get(name, {})
        e = router.get("by_pref", {}).get(name)
        parts = [f"{k} " + (f"{b[k]:.3g} -> " if k in b else "") + f"{a[k]:.3g}" for k in ("score", "accuracy", "cost_usd")]
        est = f" | estimator router: score {e['score']:.3g}, accuracy {e['accuracy']:.3g}, $ {e['cost_usd']:.3g}" if e else ""
        lines.append(f"  {name}: " + ", ".join(parts) + est)
    return lines
