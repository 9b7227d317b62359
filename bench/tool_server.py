"""Benchmark: per-call overhead of a ToolServer actor over calling the same tool in-process.

A zero-latency tool is called bare (tools.base.guarded_call) and through RayToolClient -> ToolServer actor,
interleaved call by call, so each pair sees the same machine state; the overhead is (actor round trip - bare
call). Sequential: one call at a time. Concurrent: `--inflight` calls in flight, where each call's latency
includes waiting behind the others, so it is reported with the throughput rather than as overhead.
Prints `RESULT tool_server_overhead_p50_ms=...` (goal <= 5 ms) and `..._p99_ms`, plus concurrent figures.
Usage: .venv/bin/python bench/tool_server.py [--calls 2000] [--inflight 32]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from orchestra.types import Task, ToolCall, ToolContext, ToolResult
from tools.base import guarded_call


class ZeroTool:
    """Does nothing and costs nothing: everything measured around it is overhead."""

    name, description = "zero", "returns at once"
    parameters = {"type": "object", "properties": {"i": {"type": "integer"}}}

    def schema(self, task=None):
        return {"type": "function", "function": {"name": self.name, "parameters": self.parameters}}

    def cost_bound(self, args, ctx):
        return 0.0

    async def call(self, args, ctx):
        return ToolResult("ok")


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


async def run(client, calls: int, inflight: int) -> dict[str, float]:
    tool = ZeroTool()
    ctx = ToolContext(task=Task(id="bench", problem="p", answer="a"))
    for i in range(100):  # warm up: worker connections, code paths
        await client.call(ToolCall(name="zero", arguments={"i": i}), ctx)
        await guarded_call(tool, {"i": i}, ctx)
    overhead, bare_times = [], []
    for i in range(calls):
        t0 = time.perf_counter()
        await guarded_call(tool, {"i": i}, ctx)
        t1 = time.perf_counter()
        result = await client.call(ToolCall(name="zero", arguments={"i": i}), ctx)
        t2 = time.perf_counter()
        assert result.ok, result.error
        bare_times.append(t1 - t0)
        overhead.append((t2 - t1) - (t1 - t0))
    sem = asyncio.Semaphore(inflight)
    latencies: list[float] = []

    async def one(i: int) -> None:
        async with sem:
            t0 = time.perf_counter()
            result = await client.call(ToolCall(name="zero", arguments={"i": i}), ctx)
            latencies.append(time.perf_counter() - t0)
            assert result.ok, result.error

    start = time.perf_counter()
    await asyncio.gather(*[one(i) for i in range(calls)])
    wall = time.perf_counter() - start
    return {"p50": percentile(overhead, 50) * 1e3, "p99": percentile(overhead, 99) * 1e3,
            "bare_p50_us": percentile(bare_times, 50) * 1e6, "conc_p50": percentile(latencies, 50) * 1e3,
            "conc_p99": percentile(latencies, 99) * 1e3, "conc_rate": calls / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=32)
    args = parser.parse_args()
    import ray

    from actors.tool_client import RayToolClient
    from actors.tool_server import make_tool_server

    ray.init(num_cpus=4, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    try:
        handle = make_tool_server("zero", {}, factory=ZeroTool, actor_name="tool:zero-bench", num_cpus=0.05)
        ray.get(handle.ready.remote(), timeout=120)
        fig = asyncio.run(run(RayToolClient({"zero": handle}, timeout_s=60), args.calls, args.inflight))
    finally:
        ray.shutdown()
    print(f"bare call p50 {fig['bare_p50_us']:.1f} us; sequential actor overhead p50 {fig['p50']:.2f} ms, "
          f"p99 {fig['p99']:.2f} ms; {args.inflight} in flight: latency p50 {fig['conc_p50']:.2f} ms, "
          f"p99 {fig['conc_p99']:.2f} ms, {fig['conc_rate']:.0f} calls/s")
    print(f"RESULT tool_server_overhead_p50_ms={fig['p50']:.3f}")
    print(f"RESULT tool_server_overhead_p99_ms={fig['p99']:.3f}")
    print(f"RESULT tool_server_concurrent_latency_p50_ms={fig['conc_p50']:.3f}")
    print(f"RESULT tool_server_concurrent_calls_per_s={fig['conc_rate']:.1f}")


if __name__ == "__main__":
    main()
