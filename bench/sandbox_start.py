"""Benchmark: per-call start cost of the code sandbox -> RESULT sandbox_start_p50_ms.

Times `Sandbox.run("print(1)")` end to end (spawn bwrap, build the sandbox root, start Python, read its output),
one call at a time, after one warm-up call that also pays the one-off isolation probe. With `--baseline REF`
the tools/sandbox.py of that git ref is loaded as a second module and the two are called alternately, call by
call (which goes first alternates too), so both see the same machine state (a shared host's load drifts); the
baseline's p50, the ratio of the p50s and the median of the call-by-call differences are printed as INFO, not
as a RESULT. So is the CPU time the call's processes used (bwrap, setpriv, Python: user + system, from
RUSAGE_CHILDREN), which a busy shared host inflates far less than wall time. Needs bubblewrap for the figure to
mean anything; the isolation (and whether the syscall filter was on) is printed.
Usage: .venv/bin/python bench/sandbox_start.py [--runs 30] [--baseline b2c7cd4]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

from tools.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[1]


def load_baseline(ref: str) -> types.ModuleType:
    """tools/sandbox.py as of `ref`, imported under another name (the current module stays untouched). A ref
    from after the root and process helpers left that file (tools/sandbox_root.py, sandbox_process.py) imports
    them from this checkout: only the runner is the ref's."""
    src = subprocess.check_output(["git", "show", f"{ref}:tools/sandbox.py"], cwd=REPO, text=True)
    mod = types.ModuleType("sandbox_baseline")
    mod.__file__ = f"{ref}:tools/sandbox.py"
    sys.modules[mod.__name__] = mod  # dataclasses resolve annotations through sys.modules
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


def children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1e3


async def one_call(sb) -> tuple[float, float]:
    """(wall ms, CPU ms of the processes it started)."""
    cpu, start = children_cpu_ms(), time.perf_counter()
    run = await sb.run("print(1)")
    elapsed = (time.perf_counter() - start) * 1e3
    if run.stdout.strip() != "1":
        raise SystemExit(f"sandbox run failed: {run}")
    return elapsed, children_cpu_ms() - cpu


async def main(runs: int, baseline: str | None) -> None:
    sandboxes = {"current": Sandbox()}
    if baseline:
        sandboxes[f"baseline {baseline}"] = load_baseline(baseline).Sandbox()
    times: dict[str, list[float]] = {name: [] for name in sandboxes}
    cpu: dict[str, list[float]] = {name: [] for name in sandboxes}
    for sb in sandboxes.values():
        await one_call(sb)  # warm-up: the isolation probe and the interpreter's page cache
    names = list(sandboxes)
    for i in range(runs):
        for name in (names if i % 2 == 0 else names[::-1]):
            wall, used = await one_call(sandboxes[name])
            times[name].append(wall)
            cpu[name].append(used)
    for name, sb in sandboxes.items():
        xs = sorted(times[name])
        print(f"INFO {name}: isolation={sb.isolation} seccomp={getattr(sb, 'shortfall', 'n/a') is None} "
              f"p50={statistics.median(xs):.1f} ms min={xs[0]:.1f} p90={xs[int(0.9 * (len(xs) - 1))]:.1f} ms "
              f"over {len(xs)} calls; CPU p50={statistics.median(cpu[name]):.1f} ms")
    if baseline:
        cur, base = times["current"], times[names[1]]
        print(f"INFO current / baseline p50: {statistics.median(cur) / statistics.median(base):.3f}; median of "
              f"call-by-call differences: {statistics.median(c - b for c, b in zip(cur, base)):+.1f} ms")
    print(f"RESULT sandbox_start_p50_ms={statistics.median(times['current']):.1f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--baseline", default=None, help="a git ref whose tools/sandbox.py is timed alongside")
    args = ap.parse_args()
    asyncio.run(main(args.runs, args.baseline))
