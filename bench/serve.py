"""Benchmark: what the Serve ingress adds over the in-process agent loop, and a bounded load run.

Same episode both ways: a scripted policy (tests/helpers/fakes.py ScriptedEngine, test double: one `answer` tool call,
then done) with zero-latency fake tools, so the figures are the HTTP proxy + replica + FastAPI + JSON costs,
not model time. Measured side by side in one run:
  1./2. N pairs, alternating: OrchestraService.complete() called in-process, then the same request through
     Serve on 127.0.0.1 (auth on, HTTP keep-alive); added latency = HTTP time - in-process time per pair;
  3. load: 50 concurrent async clients on loopback, 10 requests each; every non-200 or exception is an error.
Prints `RESULT serve_overhead_p50_ms=...` (goal <= 15), `RESULT serve_overhead_p99_ms=...`,
`RESULT serve_load_errors=...` (must be 0) and the load throughput.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEY = "bench-key"
N_SEQ, CLIENTS, PER_CLIENT = 200, 50, 10
BODY = {"messages": [{"role": "user", "content": "What is 2 + 2?"}], "preference": "balanced"}


def build_service(settings=None):
    """Scripted policy + zero-latency fake tools (runs in the bench process and inside the Serve replica)."""
    if str(ROOT) not in sys.path:  # inside the Serve replica: tests.helpers lives in the checkout
        sys.path.insert(0, str(ROOT))
    from actors.serve.app import OrchestraService
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from tests.helpers.fakes import ByteTokenizer, FakeTool, ScriptedEngine, call_text
    from tools.base import LocalToolClient

    tok = ByteTokenizer()
    tools = {"search": FakeTool("search", cost_usd=0.001), "answer": FakeTool("answer", cost_usd=0.002, reply="4",
                                                                               answers=True)}
    loop = AgentLoop(ScriptedEngine(tok, [call_text("answer", model="answer-1")]), LocalToolClient(tools),
                     Prompter(tok), eos_token_ids=[tok.eos_token_id])
    return OrchestraService(loop, ["search", "answer"], {"answer-1": "gpt-5"}, max_tokens=256)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def paired(url: str, n: int, warmup: int = 20) -> tuple[list[float], list[float]]:
    """Alternate one in-process episode and one HTTP request, so load drift hits both sides alike."""
    import httpx

    from actors.serve.api import ChatRequest

    svc = build_service()
    local, remote = [], []
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as c:
        for i in range(warmup + n):
            start = time.perf_counter()
            await svc.complete(svc.plan(ChatRequest.model_validate(BODY)))
            mid = time.perf_counter()
            r = await c.post("/v1/chat/completions", json=BODY)
            end = time.perf_counter()
            r.raise_for_status()
            if i >= warmup:
                local.append(mid - start)
                remote.append(end - mid)
    return local, remote


async def load(url: str) -> tuple[int, int, float]:
    import httpx

    errors = 0
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                                 limits=limits) as c:
        async def client() -> int:
            bad = 0
            for _ in range(PER_CLIENT):
                try:
                    r = await c.post("/v1/chat/completions", json=BODY)
                    bad += r.status_code != 200 or r.json()["orchestra"]["termination"] != "answered"
                except Exception:  # a dropped connection or timeout is an error too
                    bad += 1
            return bad

        start = time.perf_counter()
        errors = sum(await asyncio.gather(*(client() for _ in range(CLIENTS))))
        wall = time.perf_counter() - start
    return errors, CLIENTS * PER_CLIENT, wall


def main() -> None:
    import ray
    from ray import serve

    from actors.serve.app import deployment

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray.init(num_cpus=4, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        args = {"api_keys": [KEY], "rate_limit_per_s": 0}
        serve.run(deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 1}).bind(args, build_service),
                  name="bench", route_prefix="/")
        url = f"http://127.0.0.1:{port}"
        local, remote = asyncio.run(paired(url, N_SEQ))
        errors, total, wall = asyncio.run(load(url))
    finally:
        serve.shutdown()
        ray.shutdown()
    added = [r - lo for r, lo in zip(remote, local, strict=True)]  # per pair: what the ingress added to the same episode
    p50, p99 = statistics.median(added) * 1000, pct(added, 0.99) * 1000
    print(f"in-process p50 {statistics.median(local) * 1000:.2f} ms, via Serve p50 {statistics.median(remote) * 1000:.2f} ms "
          f"(N={N_SEQ}); load: {total} requests from {CLIENTS} clients in {wall:.1f} s")
    print(f"RESULT serve_overhead_p50_ms={p50:.2f}")
    print(f"RESULT serve_overhead_p99_ms={p99:.2f}")
    print(f"RESULT serve_load_errors={errors}")
    print(f"RESULT serve_load_rps={total / wall:.1f}")


if __name__ == "__main__":
    main()
