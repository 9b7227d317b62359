"""Benchmark: rollout throughput at 16 / 32 / 64 / 128 concurrent episodes -> RESULT rollout_scaling_128_vs_16.

The same harness as bench/engine_efficiency.py (its `build` and `agent_side`: the tiny policy on one HFEngine,
reprompt mode, in-process fake tools with zero latency), with the engine's batch cap raised to the largest
concurrency so one batch can hold every live episode. For each concurrency N, N episodes run at once and the
generated tokens over the wall time give the throughput; the sizes run in interleaved order `--repeats` times
(adjacent runs see similar load on a shared machine) and each size reports its median.

RESULT rollout_scaling_128_vs_16 = tokens/s at 128 episodes / tokens/s at 16. Perfect batching would give 8
(eight times the work in the same wall time); 1 would mean no gain from concurrency (cost grows linearly with
work). INFO lines give episodes/s, tokens/s, wall time and mean batch rows per size.

Same caveat as engine_efficiency: the untrained tiny policy rarely writes a valid tool call, so what scales is
generation plus the loop's own overhead, not tool latency (bench/rollout_overlap.py measures that).

Usage: .venv/bin/python bench/rollout_scaling.py [--sizes 16,32,64,128] [--turns 2] [--max-tokens 32]
       [--repeats 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # engine_efficiency (it puts the repo on sys.path)

from engine_efficiency import agent_side, build  # noqa: E402

from orchestra.engine import Sampling  # noqa: E402
from tests.helpers.fakes import make_task  # noqa: E402


async def main(args: argparse.Namespace) -> None:
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    engine, loop, _prompter, _client = build(args.turns, max_batch_size=max(sizes))  # one batch holds them all
    sampling = Sampling(max_tokens=args.max_tokens, temperature=1.0)
    await agent_side(loop, [make_task(i) for i in range(4)], Sampling(max_tokens=4, temperature=1.0))  # warm up
    rates: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(args.repeats):
        for n in (sizes if r % 2 == 0 else sizes[::-1]):  # interleaved: drifting load hits every size alike
            prefills0 = engine.stats()["batches"] + engine.stats()["joins"]
            tokens, wall, by_turn = await agent_side(loop, [make_task(i) for i in range(n)], sampling)
            turns = sum(map(len, by_turn))
            prefills = engine.stats()["batches"] + engine.stats()["joins"] - prefills0
            rates[n].append(tokens / wall)
            print(f"INFO repeat {r} n={n}: {tokens} tokens, {turns} turns in {wall:.2f}s = {tokens / wall:.0f} tok/s, "
                  f"{n / wall:.1f} episodes/s, mean {turns / max(prefills, 1):.1f} rows per batch or join")
    median = {n: statistics.median(v) for n, v in rates.items()}
    for n in sizes:
        print(f"INFO n={n}: median {median[n]:.0f} tok/s ({median[n] / median[sizes[0]]:.2f}x n={sizes[0]})")
    lo, hi = min(sizes), max(sizes)  # the default sizes give rollout_scaling_128_vs_16
    print(f"RESULT rollout_scaling_{hi}_vs_{lo}={median[hi] / median[lo]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,32,64,128")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads; 0 keeps torch's default")
    asyncio.run(main(parser.parse_args()))
