"""Benchmark: tool-latency overlap of 64 concurrent episodes -> RESULT rollout_overlap, speedup_vs_concurrency2.

Everything runs through the real distributed path: RolloutWorker actors (actors/rollout_worker.py) run the
shared agent loop (reprompt mode) and call the zoo's tools on ToolServer actors (actors/tool_server.py) through
RayToolClient. The policy is a SCRIPTED engine (orchestra.agent.scripted:plan_engine; the tiny policy is loaded only
for its tokenizer), so generation costs next to nothing and the figure measures overlap, not CPU speed. Every
episode makes the same three calls: search(search-3) -> enhance_reasoning(reasoner-3) -> answer(answer-4).
The experts are the SIMULATED sim zoo with `zoo.sleep=true` and every expert's `latency_s` set to `--latency`
(0.2 s; the sim expert adds its own deterministic +-25 % jitter per call), so each call sleeps ~200 ms.
Backends: by default the search tool's retriever and enhance_reasoning's sandbox are zero-latency STAND-INS
(`InstantRetriever`, `InstantSandbox` below: no index, code not run), so what is timed is the overlap of the
experts' latency, as the issue defines this figure. `--real-backends` uses the real ones instead (FAISS over
all-MiniLM-L6-v2 on CPU, a sandboxed Python subprocess per call): their CPU work then enters the figure, which
on a small shared CPU box measures CPU contention more than overlap.

Measured in one run, side by side, on `--episodes` template tasks (64):
  1. the full batch at once, tool servers with max_concurrency >= the batch (`--repeats` times; median wall);
  2. single episodes run alone, one at a time: the `--singles` episodes with the longest tool service time in
     the batch (the sim latencies are deterministic per task, so those are the slowest episodes); the longest
     single wall is the denominator (a few fixed episodes could miss the slowest one and flatter the ratio);
  3. the same batch with tool concurrency 2 (ToolOrchestra's setting): at most 2 tool calls in flight at once
     over all tools — one rollout worker whose tool client caps its outstanding calls at 2
     (zoo.server.client_max_in_flight), against a second set of tool servers (name suffix "-c2") with
     max_concurrency = 2. Floor: episodes x 3 calls x 0.2 s / 2 = 19.2 s.
  4. for comparison only (an INFO line): a cap of 2 per tool server alone (three tools pipeline, so up to 6
     calls in flight; floor ~episodes x 0.2 s / 2 = 6.4 s), with the same two-worker layout as step 1.
Walls are driver-side (the rollout actor call, round trip included), the same way for all three.
RESULT rollout_overlap = median batch wall / longest single wall (goal <= 1.25);
RESULT speedup_vs_concurrency2 = wall at tool concurrency 2 (step 3) / median batch wall (goal >= 10).
This script only measures: actors, agent loop and tools are used as they are, and no goal is asserted.
Usage: .venv/bin/python bench/rollout_overlap.py [--episodes 64] [--workers 2] [--singles 8] [--repeats 3]
       [--latency 0.2] [--low-concurrency 2] [--real-backends]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PLAN = ["search:search-3", "enhance_reasoning:reasoner-3", "answer:answer-4"]
SAMPLING = {"max_tokens": 96, "temperature": 1.0, "top_p": 1.0, "top_k": 0}


class InstantRetriever:
    """STAND-IN for the "retrieve" backend of search: answers at once with one placeholder passage."""

    name, description = "retrieve", "stand-in retriever (benchmark only)"
    parameters = {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                  "required": ["query"]}

    def schema(self, task: Any = None) -> dict[str, Any]:
        from orchestra.schema import function_schema

        return function_schema(self.name, self.description, self.parameters)

    def cost_bound(self, args: dict[str, Any], ctx: Any) -> float:
        return 0.0

    async def call(self, args: dict[str, Any], ctx: Any) -> Any:
        from orchestra.types import ToolResult

        doc = f"(stand-in passage for {args['query'][:60]!r})"
        return ToolResult(text=doc, documents=[doc])


class InstantSandbox(InstantRetriever):
    """STAND-IN for the "python" backend of enhance_reasoning: does not run the code, answers at once."""

    name, description = "python", "stand-in sandbox (benchmark only)"
    parameters = {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}

    async def call(self, args: dict[str, Any], ctx: Any) -> Any:
        from orchestra.types import ToolResult

        return ToolResult(text="(stand-in: code not run)", code_output="(stand-in: code not run)")


def build_config(corpus_path: str, latency_s: float, concurrency: int, client_cap: int = 0) -> Any:
    from orchestra.config import load_config

    base = load_config(["zoo=sim"])
    overrides = ["zoo=sim", "zoo.sleep=true", f"zoo.retriever.corpus={corpus_path}",
                 f"zoo.server.max_concurrency={concurrency}", f"zoo.server.client_max_in_flight={client_cap}",
                 "agent.context_mode=reprompt"]
    overrides += [f"zoo.experts[{name}].latency_s={latency_s}" for name in base.zoo.experts]
    return load_config(overrides)


def start_set(cfg: Any, suffix: str, n_workers: int, build_kwargs: dict[str, Any] | None
              ) -> tuple[dict[str, Any], list[Any]]:
    """Tool servers (one per tool) and rollout workers bound to them; waits until all are ready."""
    import ray

    from actors.rollout_worker import RolloutWorker
    from actors.tool_server import make_tool_servers
    from cluster.launch import model_kwargs, prompter_kwargs
    from tools.registry import zoo_dict

    handles, _ledger = make_tool_servers(zoo_dict(cfg.zoo), name_suffix=suffix, build_kwargs=build_kwargs)
    workers = []
    for i in range(n_workers):
        cls = ray.remote(RolloutWorker).options(name=f"overlap-worker-{i}{suffix}", num_cpus=0.5,
                                                max_concurrency=1000, max_restarts=0)
        workers.append(cls.remote(
            worker_id=i, model_name="tiny", model_kwargs=model_kwargs(cfg),
            engine_kind="orchestra.agent.scripted:plan_engine", engine_kwargs={"plan": PLAN},
            agent_kwargs=cfg.agent.loop_kwargs(), prompter_kwargs=prompter_kwargs(cfg), tool_handles=handles,
            tool_timeout_s=cfg.zoo.server.timeout_s, tool_max_in_flight=cfg.zoo.server.client_max_in_flight))
    ray.get([h.ready.remote() for h in handles.values()] + [w.ready.remote() for w in workers], timeout=300)
    return handles, workers


def run_batch(workers: list[Any], requests: list[dict[str, Any]]) -> tuple[float, list[Any]]:
    """All requests at once, dealt round-robin over the workers; (driver wall seconds, results)."""
    import ray

    chunks = [requests[i::len(workers)] for i in range(len(workers))]
    start = time.perf_counter()
    refs = [w.rollout.remote(c, SAMPLING, score=False) for w, c in zip(workers, chunks, strict=True) if c]
    results = [r for part in ray.get(refs, timeout=600) for r in part]
    return time.perf_counter() - start, results


def check(results: list[Any], label: str) -> dict[str, float]:
    """Every episode should answer after exactly the plan's calls, error-free; say so loudly if not."""
    from actors.rollout_worker import trajectory

    trajs = [trajectory(r) for r in results]
    bad = [t for t in trajs if t.termination != "answered" or len(t.tool_records) != len(PLAN)
           or any(not rec.result.ok for rec in t.tool_records)]
    for t in bad[:3]:
        errors = [rec.result.error for rec in t.tool_records if not rec.result.ok]
        print(f"WARNING {label}: episode {t.task_id} ended {t.termination} after {len(t.tool_records)} calls, "
              f"errors {errors} {t.error or ''}")
    queue = [float(rec.result.meta.get("queue_s", 0.0)) for t in trajs for rec in t.tool_records]
    service = [t.latency_s for t in trajs]
    per_tool: dict[str, list[float]] = {}
    for t in trajs:
        for rec in t.tool_records:
            per_tool.setdefault(rec.name, []).append(rec.result.latency_s)
    print(f"INFO {label}: mean service s per call: "
          + ", ".join(f"{n} {statistics.fmean(v):.3f} (max {max(v):.3f})" for n, v in per_tool.items()))
    return {"bad": len(bad), "queue_mean_s": statistics.fmean(queue) if queue else 0.0,
            "service_max_s": max(service, default=0.0),
            "service_mean_s": statistics.fmean(service) if service else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--singles", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--low-concurrency", type=int, default=2)
    parser.add_argument("--real-backends", action="store_true", help="FAISS retriever + sandbox, not stand-ins")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ray

    from actors.rollout_worker import trajectory
    from orchestra.data.synth.template import generate_tasks
    from orchestra.data.tasks import save_corpus

    with tempfile.TemporaryDirectory(prefix="rollout-overlap-") as tmp:
        full_cfg = build_config(str(Path(tmp) / "corpus.jsonl"), args.latency, max(args.episodes * 2, 64))
        task_set = generate_tasks(args.episodes, 0, None, "train", mapping=dict(full_cfg.zoo.tiers))
        save_corpus(task_set.corpus, Path(tmp) / "corpus.jsonl")
        requests = [{"task": t.to_dict(), "uid": f"overlap-{i}", "group_size": 1}
                    for i, t in enumerate(task_set.tasks)]
        stand_ins = {"retriever": InstantRetriever(), "sandbox": InstantSandbox()}
        build_kwargs = None if args.real_backends else stand_ins
        low_cfg = build_config(str(Path(tmp) / "corpus.jsonl"), args.latency, args.low_concurrency,
                               client_cap=args.low_concurrency)
        per_server_cfg = build_config(str(Path(tmp) / "corpus.jsonl"), args.latency, args.low_concurrency)

        ray.init(num_cpus=4, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}})
        try:
            t0 = time.perf_counter()
            _, workers = start_set(full_cfg, "", args.workers, build_kwargs)
            print(f"INFO started {args.workers} rollout workers + {len(full_cfg.zoo.tools)} tool servers "
                  f"(max_concurrency {full_cfg.zoo.server.max_concurrency}) in {time.perf_counter() - t0:.1f} s")
            run_batch(workers, requests[: len(workers)])  # warm-up: schemas, sandbox probe, first-call paths
            walls, batch = [], []
            for _ in range(max(args.repeats, 1)):
                wall, batch = run_batch(workers, requests)
                walls.append(wall)
            full = check(batch, "full concurrency")
            batch_wall = statistics.median(walls)
            # the slowest episodes by tool service time (deterministic sim latencies), each run alone
            by_service = sorted(batch, key=lambda r: -trajectory(r).latency_s)
            chosen = {r.uid for r in by_service[: max(args.singles, 1)]}  # EpisodeResult (actors/rollout_worker.py)
            singles = []
            for req in requests:
                if req["uid"] in chosen:
                    wall, res = run_batch(workers[:1], [req])
                    singles.append((wall, res[0]))
            single_wall = max(w for w, _ in singles)
            alone = check([r for _, r in singles], "single")
            for w in workers:
                ray.kill(w)

            t0 = time.perf_counter()
            _, low_workers = start_set(low_cfg, "-c2", 1, build_kwargs)  # one client: the cap is global
            print(f"INFO started the concurrency-{args.low_concurrency} set in {time.perf_counter() - t0:.1f} s")
            run_batch(low_workers, requests[:1])
            low_wall, low_batch = run_batch(low_workers, requests)
            low = check(low_batch, f"concurrency {args.low_concurrency}")
            for w in low_workers:
                ray.kill(w)
            _, per_server_workers = start_set(per_server_cfg, "-ps", args.workers, build_kwargs)
            run_batch(per_server_workers, requests[: len(per_server_workers)])
            per_server_wall, per_server_batch = run_batch(per_server_workers, requests)
            per_server = check(per_server_batch, f"concurrency {args.low_concurrency} per tool server")
        finally:
            ray.shutdown()

    backends = "real (FAISS retriever, sandbox)" if args.real_backends else "zero-latency stand-ins"
    print(f"INFO {args.episodes} episodes x {len(PLAN)} calls, expert latency {args.latency} s (+-25 % jitter), "
          f"backends: {backends}")
    print(f"INFO full concurrency: batch walls {', '.join(f'{w:.3f}' for w in walls)} s "
          f"(median {batch_wall:.3f}); "
          f"tool service per episode mean {full['service_mean_s']:.3f} s, max {full['service_max_s']:.3f} s; "
          f"mean queue per call {full['queue_mean_s'] * 1e3:.1f} ms; bad episodes {full['bad']:g}")
    print(f"INFO alone: {len(singles)} slowest episodes, walls {', '.join(f'{w:.3f}' for w, _ in singles)} s "
          f"(max {single_wall:.3f}); tool service max {alone['service_max_s']:.3f} s; "
          f"bad episodes {alone['bad']:g}")
    print(f"INFO concurrency {args.low_concurrency} (over all tools): batch wall {low_wall:.3f} s; mean queue per "
          f"call {low['queue_mean_s']:.3f} s; bad episodes {low['bad']:g}")
    print(f"INFO concurrency {args.low_concurrency} per tool server only: batch wall {per_server_wall:.3f} s "
          f"(speedup {per_server_wall / batch_wall:.2f}x); mean queue per call {per_server['queue_mean_s']:.3f} s; "
          f"bad episodes {per_server['bad']:g}")
    print(f"RESULT rollout_overlap={batch_wall / single_wall:.3f}")
    print(f"RESULT speedup_vs_concurrency2={low_wall / batch_wall:.2f}")


if __name__ == "__main__":
    main()
