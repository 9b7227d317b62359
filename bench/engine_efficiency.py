"""Benchmark: 64 concurrent agent-loop episodes vs a bare batched generate, same engine -> RESULT engine_efficiency
(reprompt context mode), engine_efficiency_transcript, and engine_efficiency_same_work(_transcript).

Both sides run the tiny policy on one HFEngine. The AGENT side runs `--episodes` episodes of
orchestra.agent.loop.AgentLoop at once (`--turns` turns, in-process fake tools with zero latency
from tests/helpers/fakes.py) and counts every generated token over the wall time of the whole run: that includes prompt
rendering, parsing, tool calls, the batching waits and turns whose batch is smaller than the first. The BARE side
sends the same first-turn prompts straight to engine.generate, concurrently (one coalesced batch), and counts its
generated tokens over its wall time. Sides alternate `--repeats` times; each repeat gives a ratio (its two
runs are adjacent in time, so they see similar load on a shared machine) and the median ratio is the RESULT.
Each side starts with the engine's kept KV caches cleared, so the bare side never reuses the agent side's work
(or the reverse); within the agent side, later turns reuse their episode's cache (`--prefix-cache-mb 0`: off).
INFO lines also give the ratio in tokens per CPU-second of this process, which other processes do not disturb.
Last, RESULT prefill_chunked_speedup times one 64 x 400-token prefill in one forward and in the engine's default
4096-token chunks (`engine.prefill_chunk_tokens`).

Later turns decode over longer contexts than the first (the history grows), so even a loop with no overhead
scores below 1 against first-turn prompts. The SAME-WORK side therefore also sends the bare engine the agent's own
prompts, turn by turn (each turn's prompts in one concurrent call, no kept caches): RESULT
engine_efficiency_same_work = agent tokens/s / that side's tokens/s, the loop's cost net of how long its prompts are.

Honest caveat: the untrained tiny policy never writes a valid tool call, so each of its turns ends with a
format-error observation rather than a tool result; the fake tools are registered (their schemas are in the
prompt) but rarely called. What is measured is the loop's own overhead around generation.

torch runs `--threads` intra-op threads (default 1): on a shared 2-core box two spinning OpenMP threads make the
tiny model's small matmuls ~50x slower; both sides use the same setting, so the ratio is unaffected.

Usage: .venv/bin/python bench/engine_efficiency.py [--episodes 64] [--turns 3] [--max-tokens 48] [--repeats 2]
       [--threads 1] [--context-mode both|reprompt|transcript] [--prefix-cache-mb 1024] [--prefill-chunk-tokens 4096]
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
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from orchestra.agent.loop import AgentLoop  # noqa: E402
from orchestra.agent.prompt import Prompter  # noqa: E402
from orchestra.engine import Sampling, eos_token_ids  # noqa: E402
from orchestra.engine.hf import HFEngine  # noqa: E402
from orchestra.policy.models import load_policy  # noqa: E402
from tests.helpers.fakes import FakeTool, make_task  # noqa: E402
from tools.base import LocalToolClient  # noqa: E402


def build(max_turns: int, max_batch_size: int = 64, context_mode: str = "reprompt", prefix_cache_mb: float = 1024,
          prefill_chunk_tokens: int = 4096):
    model, tok = load_policy("tiny")
    engine = HFEngine.from_model(model, tok, max_batch_size=max_batch_size, batch_wait_ms=2.0,
                                 prefix_cache_mb=prefix_cache_mb, prefill_chunk_tokens=prefill_chunk_tokens)
    tools = {name: FakeTool(name, cost_usd=0.001, reply=f"{name} result", answers=name == "answer")
             for name in ("search", "enhance_reasoning", "answer")}
    prompter = Prompter(tok)
    loop = AgentLoop(engine, LocalToolClient(tools), prompter, context_mode=context_mode, max_turns=max_turns,
                     eos_token_ids=eos_token_ids(tok))
    return engine, loop, prompter, LocalToolClient(tools)


def first_prompts(prompter: Prompter, client: LocalToolClient, tasks, context_mode: str) -> list[list[int]]:
    """What each episode's first turn sends the engine: the bare side's prompts."""
    if context_mode == "transcript":
        return [prompter.encode(prompter.first_messages(t), client.schemas(t)) for t in tasks]
    return [prompter.encode([prompter.system(t), prompter.reprompt_user(t, [], [], [])], client.schemas(t))
            for t in tasks]


async def agent_side(loop: AgentLoop, tasks, sampling: Sampling) -> tuple[int, float, list[list[list[int]]]]:
    """Tokens generated, wall seconds, and the prompts the engine was sent, grouped by turn index."""
    start = time.perf_counter()
    trajs = await asyncio.gather(*[loop.run(t, sampling, uid=t.id) for t in tasks])
    wall = time.perf_counter() - start
    errors = [t.error for t in trajs if t.termination == "error"]
    if errors:
        raise RuntimeError(f"{len(errors)} episodes failed, e.g. {errors[0]}")
    by_turn = [[t.turns[k].prompt_ids for t in trajs if len(t.turns) > k]
               for k in range(max(len(t.turns) for t in trajs))]
    return sum(len(turn.response_ids) for t in trajs for turn in t.turns), wall, by_turn


async def same_work_side(engine: HFEngine, by_turn: list[list[list[int]]], sampling: Sampling) -> tuple[int, float]:
    """The bare engine on the agent's own per-turn prompts: each turn's prompts in one concurrent call, turn after
    turn, no loop and no kept KV caches, so what is left of the gap to the agent side is the loop's own cost."""
    tokens, start = 0, time.perf_counter()
    for prompts in by_turn:
        engine.prefix_store.clear()
        tokens += (await bare_side(engine, prompts, sampling))[0]
    return tokens, time.perf_counter() - start


async def bare_side(engine: HFEngine, prompts: list[list[int]], sampling: Sampling) -> tuple[int, float]:
    start = time.perf_counter()
    gens = await asyncio.gather(*[engine.generate(p, sampling) for p in prompts])
    return sum(len(g.token_ids) for g in gens), time.perf_counter() - start


async def measure(args: argparse.Namespace, context_mode: str) -> tuple[float, float]:
    engine, loop, prompter, client = build(args.turns, context_mode=context_mode,
                                           prefix_cache_mb=args.prefix_cache_mb,
                                           prefill_chunk_tokens=args.prefill_chunk_tokens)
    tasks = [make_task(i) for i in range(args.episodes)]
    sampling = Sampling(max_tokens=args.max_tokens, temperature=1.0)
    prompts = first_prompts(prompter, client, tasks, context_mode)
    await bare_side(engine, prompts[:8], Sampling(max_tokens=4, temperature=1.0))  # warm up kernels and caches
    ratios, cpu_ratios, same_work = [], [], []
    for r in range(args.repeats):
        engine.prefix_store.clear()  # each side starts cold: no KV kept from the other side's identical prompts
        batches0 = engine.stats()["batches"]
        cpu0 = time.process_time()
        tokens, wall = await bare_side(engine, prompts, sampling)
        bare_cpu = tokens / (time.process_time() - cpu0)
        bare_batches = engine.stats()["batches"] - batches0
        bare_rate = tokens / wall
        print(f"INFO {context_mode} repeat {r} bare: {tokens} tokens in {wall:.2f}s = {tokens / wall:.0f} tok/s "
              f"({bare_batches} batch(es))")
        engine.prefix_store.clear()
        batches0, joins0, busy0, prompt0, reused0 = (engine.stats()[k] for k in (
            "batches", "joins", "busy_s", "prompt_tokens", "reused_prefix_tokens"))
        cpu0 = time.process_time()
        tokens, wall, by_turn = await agent_side(loop, tasks, sampling)
        turns = sum(map(len, by_turn))
        cpu_ratios.append(tokens / (time.process_time() - cpu0) / bare_cpu)
        ratios.append(tokens / wall / bare_rate)
        st = engine.stats()
        agent_batches, joins, busy = st["batches"] - batches0, st["joins"] - joins0, st["busy_s"] - busy0
        prompt_tokens = st["prompt_tokens"] - prompt0
        print(f"INFO {context_mode} repeat {r} agent loop: {tokens} tokens, {turns} turns in {wall:.2f}s = "
              f"{tokens / wall:.0f} tok/s ({agent_batches} batches + {joins} joins, mean "
              f"{turns / max(agent_batches + joins, 1):.1f} rows each, "
              f"mean prompt {prompt_tokens / turns:.0f} tokens vs {sum(map(len, prompts)) / len(prompts):.0f} on "
              f"turn 1, {(st['reused_prefix_tokens'] - reused0) / prompt_tokens:.0%} of prompt tokens reused from "
              f"kept KV caches; engine busy {busy / wall:.0%} of the wall time)")
        same_tokens, same_wall = await same_work_side(engine, by_turn, sampling)
        same_work.append(tokens / wall / (same_tokens / same_wall))
        print(f"INFO {context_mode} repeat {r} bare on the agent's own per-turn prompts: {same_tokens} tokens in "
              f"{same_wall:.2f}s = {same_tokens / same_wall:.0f} tok/s")
    print(f"INFO {context_mode} engine stats: {engine.stats()}")
    print(f"INFO {context_mode} per-repeat ratios (wall) {[round(r, 3) for r in ratios]}, (CPU time) "
          f"{[round(r, 3) for r in cpu_ratios]}; CPU-time median {statistics.median(cpu_ratios):.3f}; "
          f"vs the bare engine on the same per-turn prompts {[round(r, 3) for r in same_work]}")
    return statistics.median(ratios), statistics.median(same_work)


async def prefill_speedup(rows: int = 64, length: int = 400, repeats: int = 3) -> None:
    """RESULT prefill_chunked_speedup: one prefill of `rows` x `length` random prompt tokens (no shared prefix,
    one token generated) in one forward vs in the engine's default chunks, alternated, median walls."""
    import torch

    model, tok = load_policy("tiny")
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(300, len(tok) - 64, (length,), generator=gen).tolist() for _ in range(rows)]
    engines = {c: HFEngine.from_model(model, tok, max_batch_size=rows, prefix_cache_mb=0, prefill_chunk_tokens=c)
               for c in (0, 4096)}
    walls: dict[int, list[float]] = {c: [] for c in engines}
    for r in range(repeats + 1):  # the first round warms up
        for c, engine in engines.items():
            start = time.perf_counter()
            await asyncio.gather(*[engine.generate(p, Sampling(max_tokens=1)) for p in prompts])
            if r:
                walls[c].append(time.perf_counter() - start)
    whole, chunked = statistics.median(walls[0]), statistics.median(walls[4096])
    print(f"INFO prefill of {rows} x {length} tokens: one forward {whole:.2f}s, 4096-token chunks {chunked:.2f}s")
    print(f"RESULT prefill_chunked_speedup={whole / chunked:.3f}")


async def main(args: argparse.Namespace) -> None:
    import torch

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    modes = ["reprompt", "transcript"] if args.context_mode == "both" else [args.context_mode]
    for mode in modes:
        ratio, same_work = await measure(args, mode)
        suffix = "" if mode == "reprompt" else "_" + mode
        print(f"RESULT engine_efficiency{suffix}={ratio:.3f}")
        print(f"RESULT engine_efficiency_same_work{suffix}={same_work:.3f}")
    await prefill_speedup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads; 0 keeps torch's default")
    parser.add_argument("--context-mode", choices=["reprompt", "transcript", "both"], default="both")
    parser.add_argument("--prefix-cache-mb", type=float, default=1024,
                        help="the engine's kept-KV budget; 0 turns per-episode prefix reuse off")
    parser.add_argument("--prefill-chunk-tokens", type=int, default=4096,
                        help="prompt tokens per prefill forward; 0: one forward per prefill")
    asyncio.run(main(parser.parse_args()))
