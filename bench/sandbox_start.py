"""Benchmark: per-call start cost of the code sandbox -> RESULT sandbox_start_p50_ms.

Times `Sandbox.run("print(1)")` end to end (spawn bwrap, build the sandbox root, start Python, read its output),
one call at a time, after one warm-up call that also pays the one-off isolation probe. With `--baseline REF`
the tools/sandbox.py of that git ref is loaded as a second module and the two are called alternately, call by
call, so both see the same machine state (a shared host's load drifts); the baseline's p50 is printed as INFO,
not as a RESULT. Needs bubblewrap for the figure to mean anything; the isolation that ran is printed.
Usage: .venv/bin/python bench/sandbox_start.py [--runs 30] [--baseline b2c7cd4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

from tools.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[1]


def load_baseline(ref: str) -> types.ModuleType:
    """tools/sandbox.py as of `ref`, imported under another name (the current module stays untouched)."""
    src = subprocess.check_output(["git", "show", f"{ref}:tools/sandbox.py"], cwd=REPO, text=True)
    mod = types.ModuleType("sandbox_baseline")
    mod.__file__ = f"{ref}:tools/sandbox.py"
    sys.modules[mod.__name__] = mod  # dataclasses resolve annotations through sys.modules
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


async def one_call(sb) -> float:
    start = time.perf_counter()
    run = await sb.run("print(1)")
    elapsed = (time.perf_counter() - start) * 1e3
    if run.stdout.strip() != "1":
        raise SystemExit(f"sandbox run failed: {run}")
    return elapsed


async def main(runs: int, baseline: str | None) -> None:
    sandboxes = {"current": Sandbox()}
    if baseline:
        sandboxes[f"baseline {baseline}"] = load_baseline(baseline).Sandbox()
    times: dict[str, list[float]] = {name: [] for name in sandboxes}
    for sb in sandboxes.values():
        await one_call(sb)  # warm-up: the isolation probe and the interpreter's page cache
    for _ in range(runs):
        for name, sb in sandboxes.items():
            times[name].append(await one_call(sb))
    for name, sb in sandboxes.items():
        xs = sorted(times[name])
        print(f"INFO {name}: isolation={sb.isolation} p50={statistics.median(xs):.1f} ms "
              f"min={xs[0]:.1f} p90={xs[int(0.9 * (len(xs) - 1))]:.1f} ms over {len(xs)} calls")
    print(f"RESULT sandbox_start_p50_ms={statistics.median(times['current']):.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--baseline", default=None, help="a git ref whose tools/sandbox.py is timed alongside")
    args = ap.parse_args()
    asyncio.run(main(args.runs, args.baseline))
