"""Benchmark: 64 concurrent agent-loop episodes vs a bare batched generate, same engine -> RESULT engine_efficiency.

Both sides run the tiny policy on one HFEngine. The AGENT side runs `--episodes` episodes of
orchestra.agent_loop.AgentLoop at once (reprompt mode, `--turns` turns, in-process fake tools with zero latency
from tests/fakes.py) and counts every generated token over the wall time of the whole run: that includes prompt
rendering, parsing, tool calls, the batching waits and turns whose batch is smaller than the first. The BARE side
sends the same first-turn prompts straight to engine.generate, concurrently (one coalesced batch), and counts its
generated tokens over its wall time. Sides alternate `--repeats` times; each repeat gives a ratio (its two
runs are adjacent in time, so they see similar load on a shared machine) and the median ratio is the RESULT.
INFO lines also give the ratio in tokens per CPU-second of this process, which other processes do not disturb.

Honest caveat: the untrained tiny policy never writes a valid tool call, so each of its turns ends with a
format-error observation rather than a tool result; the fake tools are registered (their schemas are in the
prompt) but rarely called. What is measured is the loop's own overhead around generation.

torch runs `--threads` intra-op threads (default 1): on a shared 2-core box two spinning OpenMP threads make the
tiny model's small matmuls ~50x slower; both sides use the same setting, so the ratio is unaffected.

Usage: .venv/bin/python bench/engine_efficiency.py [--episodes 64] [--turns 3] [--max-tokens 48] [--repeats 2]
       [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # fakes.py
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from fakes import FakeTool, make_task  # noqa: E402

from orchestra.agent_loop import AgentLoop  # noqa: E402
from orchestra.engine import HFEngine, Sampling  # noqa: E402
from orchestra.models import eos_token_ids, load_policy  # noqa: E402
from orchestra.prompt import Prompter  # noqa: E402
from tools.base import LocalToolClient  # noqa: E402


def build(max_turns: int, max_batch_size: int = 64):
    model, tok = load_policy("tiny")
    engine = HFEngine.from_model(model, tok, max_batch_size=max_batch_size, batch_wait_ms=2.0)
    tools = {name: FakeTool(name, cost_usd=0.001, reply=f"{name} result", answers=name == "answer")
             for name in ("search", "enhance_reasoning", "answer")}
    prompter = Prompter(tok)
    loop = AgentLoop(engine, LocalToolClient(tools), prompter, context_mode="reprompt", max_turns=max_turns,
                     eos_token_ids=eos_token_ids(tok))
    return engine, loop, prompter, LocalToolClient(tools)


async def agent_side(loop: AgentLoop, tasks, sampling: Sampling) -> tuple[int, float, int]:
    start = time.perf_counter()
    trajs = await asyncio.gather(*[loop.run(t, sampling, uid=t.id) for t in tasks])
    wall = time.perf_counter() - start
    errors = [t.error for t in trajs if t.termination == "error"]
    if errors:
        raise RuntimeError(f"{len(errors)} episodes failed, e.g. {errors[0]}")
    return sum(len(turn.response_ids) for t in trajs for turn in t.turns), wall, sum(len(t.turns) for t in trajs)


async def bare_side(engine: HFEngine, prompts: list[list[int]], sampling: Sampling) -> tuple[int, float]:
    start = time.perf_counter()
    gens = await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])
    return sum(len(g.token_ids) for g in gens), time.perf_counter() - start


async def main(args: argparse.Namespace) -> None:
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    engine, loop, prompter, client = build(args.turns)
    tasks = [make_task(i) for i in range(args.episodes)]
    sampling = Sampling(max_tokens=args.max_tokens, temperature=1.0)
    prompts = [prompter.encode([prompter.system(t), prompter.reprompt_user(t, [], [], [])], client.schemas(t))
               for t in tasks]
    await bare_side(engine, prompts[:8], Sampling(max_tokens=4, temperature=1.0))  # warm up kernels and caches
    ratios, cpu_ratios = [], []
    for r in range(args.repeats):
        batches0 = engine.stats()["batches"]
        cpu0 = time.process_time()
        tokens, wall = await bare_side(engine, prompts, sampling)
        bare_cpu = tokens / (time.process_time() - cpu0)
        bare_batches = engine.stats()["batches"] - batches0
        bare_rate = tokens / wall
        print(f"INFO repeat {r} bare: {tokens} tokens in {wall:.2f}s = {tokens / wall:.0f} tok/s "
              f"({bare_batches} batch(es))")
        batches0, busy0, prompt0 = (engine.stats()[k] for k in ("batches", "busy_s", "prompt_tokens"))
        cpu0 = time.process_time()
        tokens, wall, turns = await agent_side(loop, tasks, sampling)
        cpu_ratios.append(tokens / (time.process_time() - cpu0) / bare_cpu)
        ratios.append(tokens / wall / bare_rate)
        agent_batches = engine.stats()["batches"] - batches0
        busy = engine.stats()["busy_s"] - busy0
        mean_prompt = (engine.stats()["prompt_tokens"] - prompt0) / turns
        print(f"INFO repeat {r} agent loop: {tokens} tokens, {turns} turns in {wall:.2f}s = {tokens / wall:.0f} "
              f"tok/s ({agent_batches} batches, mean {turns / max(agent_batches, 1):.1f} rows, mean prompt "
              f"{mean_prompt:.0f} tokens vs {sum(map(len, prompts)) / len(prompts):.0f} on turn 1; engine busy "
              f"{busy / wall:.0%} of the wall time)")
    print(f"INFO engine stats: {engine.stats()}")
    print(f"INFO per-repeat ratios (wall) {[round(r, 3) for r in ratios]}, (CPU time) "
          f"{[round(r, 3) for r in cpu_ratios]}; CPU-time median {statistics.median(cpu_ratios):.3f}")
    print(f"RESULT engine_efficiency={statistics.median(ratios):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads; 0 keeps torch's default")
    asyncio.run(main(parser.parse_args()))
