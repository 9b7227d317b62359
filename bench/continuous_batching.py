"""Benchmark: continuous batching in the HF engine -> RESULT continuous_batching_speedup.

Agent episodes do not reach the engine in lockstep: turns end at different lengths and tool calls take
different times, so requests arrive while a batch is decoding. With static batching (`join_every=0`) such a
request waits for the whole running batch to finish; with continuous batching (`join_every=N`) it joins the
running batch at the next N-th decode step.

Workload (the same seeded schedule for every setting): `--episodes` concurrent episodes on the tiny policy, each
`--turns` transcript-style turns (the next prompt is the previous prompt + the response + an observation of
~`--obs-tokens` tokens, so kept KV caches are reused as in training); per turn a max_tokens drawn uniformly from
[`--min-tokens`, `--max-tokens`] (seeded sampling at temperature 1 makes rows stop at different steps) and, after
it, a simulated tool call that sleeps a latency drawn uniformly from [0, `--max-tool-s`] s. The settings run
alternately `--repeats` times on fresh engines (adjacent runs see the same load) and each reports its median.

RESULT continuous_batching_speedup = median wall of static batching / median wall with `join_every` =
`--join-every` (> 1: continuous batching finishes the same work sooner). INFO lines give tokens/s, the mean wait
of a request for a batch, batches and joins for every setting, including `--also` (other join intervals).

Usage: .venv/bin/python bench/continuous_batching.py [--episodes 32] [--turns 4] [--max-tool-s 0.3]
       [--min-tokens 8] [--max-tokens 48] [--obs-tokens 24] [--join-every 8] [--also 1,4,16] [--repeats 3]
       [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from orchestra.agent.prompt import Prompter  # noqa: E402
from orchestra.engine import Sampling  # noqa: E402
from orchestra.engine.hf import HFEngine  # noqa: E402
from orchestra.policy.models import load_policy  # noqa: E402
from tests.helpers.fakes import make_task  # noqa: E402


def schedule(args: argparse.Namespace) -> list[list[tuple[int, float]]]:
    """Per episode, per turn: (max_tokens, tool seconds after the turn). Seeded: every setting gets the same."""
    rng = random.Random(0)
    return [[(rng.randint(args.min_tokens, args.max_tokens), rng.uniform(0, args.max_tool_s))
             for _ in range(args.turns)] for _ in range(args.episodes)]


async def episode(engine: HFEngine, prompt: list[int], plan: list[tuple[int, float]], obs: list[int],
                  seed: int) -> int:
    tokens = 0
    for turn, (max_tokens, tool_s) in enumerate(plan):
        gen = await engine.generate(prompt, Sampling(max_tokens=max_tokens, temperature=1.0, seed=seed * 100 + turn))
        tokens += len(gen.token_ids)
        await asyncio.sleep(tool_s)  # the tool call
        prompt = prompt + gen.token_ids + obs
    engine.release(prompt)
    return tokens


async def run(model, tok, prompts, plans, obs, join_every: int) -> tuple[float, int, dict]:
    engine = HFEngine.from_model(model, tok, max_batch_size=64, batch_wait_ms=2.0, join_every=join_every)
    start = time.perf_counter()
    tokens = await asyncio.gather(*[episode(engine, p, plan, obs, i)
                                    for i, (p, plan) in enumerate(zip(prompts, plans, strict=True))])
    return time.perf_counter() - start, sum(tokens), engine.stats()


async def main(args: argparse.Namespace) -> None:
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model, tok = load_policy("tiny")
    prompter = Prompter(tok)
    tasks = [make_task(i) for i in range(args.episodes)]
    prompts = [prompter.encode(prompter.first_messages(t), []) for t in tasks]
    obs = tok.encode(" <tool_response> search result: " + "the capital is named after a river. " * 8,
                     add_special_tokens=False)[:args.obs_tokens]
    plans = schedule(args)
    settings = [0, args.join_every, *[int(x) for x in args.also.split(",") if x and int(x) != args.join_every]]
    await run(model, tok, prompts[:4], [p[:1] for p in plans[:4]], obs, 0)  # warm up
    walls: dict[int, list[float]] = {s: [] for s in settings}
    for r in range(args.repeats):
        for s in (settings if r % 2 == 0 else settings[::-1]):  # interleaved: drifting load hits every setting
            wall, tokens, st = await run(model, tok, prompts, plans, obs, s)
            walls[s].append(wall)
            print(f"INFO repeat {r} join_every={s}: {tokens} tokens in {wall:.2f}s = {tokens / wall:.0f} tok/s; "
                  f"{st['batches']} batches + {st['joins']} joins, mean {st['rows'] / (st['batches'] + st['joins']):.1f}"
                  f" rows each, mean wait for a batch {1000 * st['queue_wait_s'] / st['rows']:.0f} ms per request, "
                  f"engine busy {st['busy_s'] / wall:.0%}")
    median = {s: statistics.median(w) for s, w in walls.items()}
    for s in settings:
        print(f"INFO join_every={s}: median wall {median[s]:.2f}s ({median[0] / median[s]:.2f}x static)")
    print(f"RESULT continuous_batching_speedup={median[0] / median[args.join_every]:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tool-s", type=float, default=0.3)
    parser.add_argument("--min-tokens", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--obs-tokens", type=int, default=24)
    parser.add_argument("--join-every", type=int, default=8)
    parser.add_argument("--also", default="1,4,16", help="other join intervals to report (INFO lines)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads; 0 keeps torch's default")
    asyncio.run(main(parser.parse_args()))
