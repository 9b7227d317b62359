"""Benchmark: what the Serve ingress adds over the in-process agent loop, a bounded load run, and what router
mode (`policy: router`) adds to the one expert call it makes.

Same episode both ways: a scripted policy (tests/helpers/fakes.py ScriptedEngine, test double: one `answer` tool call,
then done) with zero-latency fake tools, so the figures are the HTTP proxy + replica + FastAPI + JSON costs,
not model time. Measured side by side in one run:
  1./2. N pairs, alternating: OrchestraService.complete() called in-process, then the same request through
     Serve on 127.0.0.1 (auth on, HTTP keep-alive); added latency = HTTP time - in-process time per pair;
  3. load: 50 concurrent async clients on loopback, 10 requests each; every non-200 or exception is an error.
  4. router mode, in-process, before Ray starts: N pairs, alternating, of one bare OpenAIExpert call and one
     router-mode request (OrchestraService.complete) against the same fake OpenAI-compatible endpoint on 127.0.0.1
     (tests/helpers/fake_openai.py) with a fixed service time; the router is an estimator fitted here on synthetic
     outcomes over the real MiniLM features, and every request is a new problem (no embedding cache hit). Added
     time = routed - bare per pair: embedding, the estimator's pick, the agent loop, the answer tool, the response.
Prints `RESULT serve_overhead_p50_ms=...` (goal <= 15), `RESULT serve_overhead_p99_ms=...`,
`RESULT serve_load_errors=...` (must be 0), the load throughput, `RESULT router_overhead_p50_ms=...` and
`RESULT router_pick_p50_ms=...` (the part of it that is the router's choice: embedding + estimator).
`--router-only` runs step 4 alone (no Ray); `--smoke` step 4 with 10 pairs (tests); `--embed-dtype=float32` embeds
in another precision than a run's default (router.embed_dtype) in step 4.
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
N_ROUTER, EXPERT_S = 100, 0.02  # router-mode pairs; the fake expert's fixed service time
BODY = {"messages": [{"role": "user", "content": "What is 2 + 2?"}], "preference": "balanced"}


def build_service(settings=None):
    """Scripted policy + zero-latency fake tools (runs in the bench process and inside the Serve replica)."""
    if str(ROOT) not in sys.path:  # inside the Serve replica: tests.helpers lives in the checkout
        sys.path.insert(0, str(ROOT))
    from actors.serve.service import OrchestraService
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


def router_service(base_url: str, embed_dtype: str = ""):
    """Router mode over two OpenAI-compatible experts at `base_url` -> (service, the weak tier's expert)."""
    import random

    from actors.serve.service import OrchestraService
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from orchestra.config.schema import RouterConfig
    from orchestra.routing.estimator import RouteEstimator, TaskFeatures
    from orchestra.routing.plans import Outcome, Plan
    from orchestra.routing.router import EstimatorRouter
    from orchestra.types import Task
    from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
    from tools.base import LocalToolClient
    from tools.experts.openai import OpenAIExpert
    from tools.orchestra_tools import AnswerTool
    from tools.pricing import PriceTable
    from tools.retrieval.dense import embed_texts

    tiers = {"answer-1": "strong", "answer-2": "weak"}
    plans = [Plan(t, (("answer", t),)) for t in tiers]
    rng = random.Random(0)
    tasks = [Task(id=f"t{i}", problem=f"{'hard' if i % 2 else 'easy'} question {i}", answer="") for i in range(40)]
    p_right = {"answer-1": {"easy": 0.95, "hard": 0.95}, "answer-2": {"easy": 0.9, "hard": 0.3}}
    outcomes = [Outcome(t.id, p.name, rng.random() < p_right[p.name][t.problem.split()[0]],
                        0.02 if p.name == "answer-1" else 0.0001, 1.0) for t in tasks for p in plans]
    # what a served router embeds with: all-MiniLM-L6-v2 at a run's default precision (router.embed_dtype)
    features = TaskFeatures(embed_texts("", embed_dtype or RouterConfig().embed_dtype))
    router = EstimatorRouter(RouteEstimator(plans).fit(features(tasks), [t.id for t in tasks], outcomes), features,
                             cost_scale=0.01, latency_scale=10.0)
    experts = {name: OpenAIExpert(name, "gpt-5-mini", PriceTable(), base_url=base_url, max_tokens=64, retries=0)
               for name in tiers.values()}
    tok = ByteTokenizer()
    loop = AgentLoop(ScriptedEngine(tok, [call_text("answer", model="answer-2")]),  # replaced per request
                     LocalToolClient({"answer": AnswerTool(experts, tiers)}), Prompter(tok),
                     eos_token_ids=[tok.eos_token_id])
    svc = OrchestraService(loop, ["answer"], tiers, max_tokens=256,
                           router=router.single_caller(tok, tok.eos_token_id, tiers))
    return svc, experts["weak"]


async def router_pairs(svc, expert, n: int, warmup: int = 10) -> tuple[list[float], list[float]]:
    """Alternate one bare expert call and one router-mode request, each on a problem not seen before."""
    from actors.serve.api import ChatRequest

    bare, routed = [], []
    for i in range(warmup + n):
        problem = f"question {i}: what is {i} * 7?"
        body = {"messages": [{"role": "user", "content": problem}], "preference": "balanced"}
        start = time.perf_counter()
        reply = await expert.complete([{"role": "user", "content": problem}], 64)
        mid = time.perf_counter()
        out = await svc.complete(svc.plan(ChatRequest.model_validate(body)))
        end = time.perf_counter()
        assert reply.ok and out["orchestra"]["termination"] == "answered", out["orchestra"]["trace"]
        if i >= warmup:
            bare.append(mid - start)
            routed.append(end - mid)
    return bare, routed


def router_overhead(n: int = N_ROUTER, embed_dtype: str = "") -> None:
    import torch

    from tests.helpers.fake_openai import FakeOpenAI

    # one intra-op thread, as in a Serve replica (Ray sets OMP_NUM_THREADS to its num_cpus, 1 in conf/serve.yaml);
    # two threads on a busy 2-core box spend most of an embedding waiting for each other
    torch.set_num_threads(1)

    def reply(_messages) -> str:
        time.sleep(EXPERT_S)  # the expert's fixed service time
        return "The answer is \\boxed{42}"

    with FakeOpenAI(reply) as fake:
        svc, expert = router_service(fake.base_url, embed_dtype)
        pick, picks = svc.router, []

        def timed(task):  # the router's own share: embedding the problem + the estimator's choice
            start = time.perf_counter()
            engine = pick(task)
            picks.append(time.perf_counter() - start)
            return engine

        svc.router = timed
        bare, routed = asyncio.run(router_pairs(svc, expert, n))
    added = [r - b for r, b in zip(routed, bare, strict=True)]
    print(f"router mode: bare expert call p50 {statistics.median(bare) * 1000:.2f} ms, routed request p50 "
          f"{statistics.median(routed) * 1000:.2f} ms (expert service time {EXPERT_S * 1000:.0f} ms, N={n})")
    print(f"RESULT router_overhead_p50_ms={statistics.median(added) * 1000:.2f}")
    print(f"RESULT router_pick_p50_ms={statistics.median(picks[-n:]) * 1000:.2f}")


def main() -> None:
    smoke = "--smoke" in sys.argv  # 10 router pairs, no Serve: a seconds-long check that the script runs
    dtype = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--embed-dtype=")), "")
    router_overhead(10 if smoke else N_ROUTER, dtype)  # first, in-process: before Ray's processes share the CPUs
    if "--router-only" in sys.argv or smoke:
        return
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
