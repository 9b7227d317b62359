"""The warm start's memory on one GPU: `bash bench/gpu_smoke.sh --warm-start-8b` (bench/gpu_smoke.py calls `run`).

h100_2x8 runs the project's warm start (SFT on the teacher's demonstrations) as the verl job's first stage, on a
local learner with one GPU: Qwen3-8B with LoRA adapters (r 64, alpha 128). This builds Qwen3-8B's shape (36 layers,
hidden 4096, 32 query / 8 KV heads of 128, MLP 12288, vocab 151936, untied head) with random weights, in bf16, on
the GPU (built there: seconds), attaches the adapters through orchestra/policy/lora.py, and runs
`Learner.sft_update` on `SAMPLES` samples of L tokens for each L of `--lengths`, with the learner settings of
conf/experiment/h100_2x8.yaml (`PRESET`; tests/bench/test_gpu_smoke.py checks they agree). A sample is a prompt
whose first `SHARED` tokens every sample shares (system turn + tool catalogue) and a `RESPONSE`-token response, as
a reprompt SFT sample is: a long prompt, a short response. One unmeasured step at the first length comes first
(kernels, allocator, AdamW's state). Per length: RESULT gpu_warm_start_peak_gib_<L> (peak CUDA allocation of the
step) and RESULT gpu_warm_start_step_s_<L>; a length that runs out of memory prints `oom` for both and the next
one runs. `--smoke` (CPU tests) uses a tiny random Qwen3 and a budget scaled to it; peak there is the process's RSS.
Needs torch, transformers and peft only (no omegaconf: the preset's values are written out here).
"""

from __future__ import annotations

import gc
import math
import resource
import time
from typing import Any

QWEN3_8B = dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                intermediate_size=12288, vocab_size=151936, max_position_embeddings=40960, rope_theta=1e6,
                rms_norm_eps=1e-6, tie_word_embeddings=False)
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=512, max_position_embeddings=1024, tie_word_embeddings=False)
# h100_2x8's learner (algo.* and sft.lr of conf/experiment/h100_2x8.yaml) and adapters (model.lora)
PRESET = dict(micro_batch_size=4, gradient_checkpointing=True, logit_chunk_tokens=2048, micro_batch_tokens=32768,
              lr=1e-6, sft_lr=1e-4, kl_coef=1e-4)
LORA = dict(r=64, alpha=128.0)
SAMPLES, RESPONSE, SHARED = 8, 512, 1024
LENGTHS = "2048,4096,8192,24576"
# --smoke: the same path at a toy scale; a budget of 256 tokens puts the 128-token samples two to a micro-batch
SMOKE = dict(response=16, shared=16, lengths="64,128", micro_batch_tokens=256, logit_chunk_tokens=32)


def build(shape: dict[str, Any], device: str, dtype: Any) -> Any:
    """A random Qwen3ForCausalLM of `shape`, created on `device` in `dtype` (no fp32 copy, no CPU init)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(**shape, attn_implementation="sdpa", pad_token_id=0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)  # the adapters peft adds keep their fp32, as in the learner actor
    return model.eval()


def make_samples(length: int, response: int, shared: int, vocab: int, seed: int) -> list[Any]:
    import torch

    from orchestra.types import TrainSample

    g = torch.Generator().manual_seed(seed)
    rand = lambda n: torch.randint(1, vocab, (n,), generator=g).tolist()  # noqa: E731
    prefix = rand(shared)
    return [TrainSample(prefix + rand(length - response - shared), rand(response), [1] * response, [0.0] * response,
                        0.0) for _ in range(SAMPLES)]


def peak_gib(device: str, reset: bool = False) -> float:
    import torch

    if device != "cuda":
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux; never reset
    if reset:
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return torch.cuda.max_memory_allocated() / 2**30


def run(device: str, smoke: bool, lengths: str = "", micro_batch_tokens: int | None = None,
        logit_chunk_tokens: int | None = None) -> list[str]:
    """The check (module docstring); returns the failures (non-finite loss, no step taken), empty when fine."""
    import torch

    from actors.learner import Learner
    from orchestra.policy import lora
    from orchestra.policy.memory import micro_batches

    settings = dict(PRESET)
    response, shared = (SMOKE["response"], SMOKE["shared"]) if smoke else (RESPONSE, SHARED)
    if smoke:
        settings.update(micro_batch_tokens=SMOKE["micro_batch_tokens"], logit_chunk_tokens=SMOKE["logit_chunk_tokens"])
    if micro_batch_tokens is not None:
        settings["micro_batch_tokens"] = micro_batch_tokens
    if logit_chunk_tokens is not None:
        settings["logit_chunk_tokens"] = logit_chunk_tokens
    sizes = [int(x) for x in (lengths or (SMOKE["lengths"] if smoke else LENGTHS)).split(",")]
    if min(sizes) <= response + shared:
        raise ValueError(f"--lengths must exceed the response ({response}) + shared prefix ({shared}) tokens")
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None
    t0 = time.perf_counter()
    shape = TINY if smoke else QWEN3_8B
    model = lora.attach(build(shape, device, torch.bfloat16 if device == "cuda" else torch.float32), **LORA)
    sync()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"gpu_smoke: warm start: {'tiny Qwen3' if smoke else 'Qwen3-8B shape'} (random), {n_params / 1e6:,.1f}M "
          f"parameters with LoRA r {LORA['r']} alpha {LORA['alpha']:g}, built in {time.perf_counter() - t0:.1f} s; "
          f"{SAMPLES} samples per step, each a {shared}-token shared prefix + own prompt + {response}-token response; "
          f"learner {settings}")
    learner = Learner(model, pad_token_id=0, device=device, seed=0, **settings)
    failures: list[str] = []
    warm = make_samples(sizes[0], response, shared, shape["vocab_size"], seed=0)
    learner.sft_update(warm)  # unmeasured: kernels, allocator, AdamW's state (a real step carries it too)
    for length in sizes:
        batch = make_samples(length, response, shared, shape["vocab_size"], seed=length)
        mbs = micro_batches([length] * SAMPLES, settings["micro_batch_size"], settings["micro_batch_tokens"])
        peak_gib(device, reset=True)
        sync()
        start, out = time.perf_counter(), None
        try:
            out = learner.sft_update(batch)
            sync()
        except torch.cuda.OutOfMemoryError:
            pass  # handled below, once the exception (and the frames it holds) is gone
        if out is None:
            learner.optimizer.zero_grad(set_to_none=True)
            print(f"gpu_smoke: warm start L={length}: out of memory ({len(mbs)} micro-batches of "
                  f"{SAMPLES // len(mbs)})")
            print(f"RESULT gpu_warm_start_peak_gib_{length}=oom")
            print(f"RESULT gpu_warm_start_step_s_{length}=oom")
            peak_gib(device, reset=True)
            continue
        step_s, peak = time.perf_counter() - start, peak_gib(device)
        print(f"gpu_smoke: warm start L={length}: {len(mbs)} micro-batches of {SAMPLES // len(mbs)} rows, "
              f"{int(out['tokens'])} response tokens, sft_loss {out['sft_loss']:.3f}, grad_norm {out['grad_norm']:.3f}")
        print(f"RESULT gpu_warm_start_peak_gib_{length}={peak:.2f}")
        print(f"RESULT gpu_warm_start_step_s_{length}={step_s:.2f}")
        if not (math.isfinite(out["sft_loss"]) and math.isfinite(out["grad_norm"])) or out["skipped"]:
            failures.append(f"warm start L={length}: sft_loss {out['sft_loss']}, grad_norm {out['grad_norm']}, "
                            f"skipped {out['skipped']}")
    return failures
