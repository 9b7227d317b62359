#!/usr/bin/env bash
# A CUDA check that fits a bare GPU box (torch + transformers + peft; no Ray, verl, vLLM, venv or hub): our HF
# engine in bf16 with KV reuse, then the local learner's GRPO step (full and LoRA) on one GPU, with SmolLM2-135M
# when its package is there, else Qwen3-0.6B's shape with random weights. The work is bench/gpu_smoke.py; this
# picks the interpreter (PY, default python3 on PATH) and caps the run at 8 minutes. Prints RESULT gpu_gen_tok_s=,
# gpu_step_s=, gpu_peak_mem_gib=, gpu_lora_step_s=, gpu_lora_peak_mem_gib=; where something is missing, one
# `SKIP gpu_smoke: <reason>` line and exit 0. verl's own GPU job is tested elsewhere (cluster/verl/job.py).
# `--warm-start-8b` runs instead the warm start's memory check (Qwen3-8B's shape, LoRA r 64, h100_2x8's learner settings;
# bench/gpu_warm_start.py): RESULT gpu_warm_start_peak_gib_<L>= and gpu_warm_start_step_s_<L>= per sample length.
# Usage: bash bench/gpu_smoke.sh [--model auto|qwen3|smollm2] [--no-lora] [--loss auto|verl|standin]
#        bash bench/gpu_smoke.sh --warm-start-8b [--lengths 2048,4096,8192,24576]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1

if ! command -v "$PY" >/dev/null 2>&1; then echo "SKIP gpu_smoke: no Python interpreter '$PY' on PATH (set PY=...)"; exit 0; fi
if command -v timeout >/dev/null 2>&1; then
  exec timeout 480 "$PY" bench/gpu_smoke.py --device cuda "$@"
fi
exec "$PY" bench/gpu_smoke.py --device cuda "$@"
