#!/usr/bin/env bash
# GPU smoke test of the verl backend: 2 GRPO steps of the tiny Qwen3 (built from TinyModelConfig, saved with its
# tokenizer to a scratch dir) on ONE GPU through verl 0.9.1's V1 trainer (vLLM rollout, FSDP actor) with our agent
# loop, tool servers and reward actor (cluster/verl_job.py --here). Needs a CUDA GPU and the `gpu` extra (vllm);
# elsewhere it prints one SKIP line with the reason and exits 0. Usage: bash bench/gpu_smoke.sh [key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false

if [ ! -x "$PY" ]; then echo "SKIP gpu_smoke: no project venv at $PY (make setup)"; exit 0; fi
if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "SKIP gpu_smoke: no CUDA GPU visible to torch"; exit 0
fi
if ! "$PY" -c "import vllm" 2>/dev/null; then
  echo "SKIP gpu_smoke: vllm is not installed (install the gpu extra: pip install -e '.[gpu]')"; exit 0
fi

RUN=runs/gpu_smoke
MODEL="$PWD/$RUN/tiny-qwen3"
mkdir -p "$RUN"
"$PY" - "$MODEL" <<'PYEOF'
import sys
from orchestra.config import TinyModelConfig
from orchestra.policy.models import load_policy
model, tok = load_policy("tiny", tiny=TinyModelConfig(), dtype="bfloat16", device="cpu", seed=0)
model.save_pretrained(sys.argv[1])
tok.save_pretrained(sys.argv[1])
print(f"tiny Qwen3 ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params) saved to {sys.argv[1]}")
PYEOF

start=$(date +%s)
rm -f "$RUN/verl/agent_loop.yaml"  # restage with this run's overrides
"$PY" -m cluster.verl_job experiment=h100_2x8 run_dir="$RUN" model.name="$MODEL" \
  verl.nnodes=1 verl.gpus_per_node=1 verl.trainer_mode=sync verl.storage_units=1 \
  algo.steps=2 algo.group_size=2 algo.prompts_per_step=2 algo.micro_batch_size=2 algo.lr=1e-5 \
  agent.max_turns=2 agent.max_context_tokens=1024 agent.doc_chars=600 agent.code_chars=300 agent.attempt_chars=300 \
  sampling.max_tokens=128 engine.max_model_len=2048 engine.gpu_memory_utilization=0.3 \
  data.n_train=8 data.n_heldout=2 cluster.num_rollout_workers=1 checkpoint.every_steps=0 \
  "verl.overrides=['trainer.val_before_train=False','trainer.logger=[console]','reward.num_workers=1','data.dataloader_num_workers=0']" \
  "$@" --here
echo "gpu_smoke: OK (2 GRPO steps through verl on one GPU in $(( $(date +%s) - start )) s)"
