"""Benchmark: Learner.update vs a bare torch fwd + bwd + AdamW step on the same tokens -> RESULT learner_overhead.

Both sides train identical copies of the same model on the same batch (default 32 samples x ~300 tokens:
200 prompt + 100 response tokens, a few tool tokens masked), interleaved, median of `--repeats` runs.

What the learner's time INCLUDES (all of `update`, honestly): collating the samples into tensors, the frozen
reference model's forward (no grad; the KL term, kl_coef=1e-4 as in conf defaults), the training forward with
logprobs gathered at response positions + entropy metric, verl's loss (clip, dual clip, KL, agg_loss), backward,
grad-norm clipping and the AdamW step. Old logprobs cost no extra forward: with ppo_epochs=1 the training forward
is that computation (see actors/learner.py). The BARE side gets a pre-collated batch and does only
model(...).logits -> log_softmax at response positions -> masked advantage-weighted loss -> backward -> AdamW.
The learner computes logits only at response positions, which the plain bare step does not; INFO lines also
give the ratio against a bare step with that same response-only head, and a KL-free learner (no reference
forward). Only learner_overhead (vs the plain bare step) is a RESULT.

The model is the policy `make train` trains: the experiment's model config (`--experiment`, default cpu_tiny: 2
layers, vocab 4096). Until issue 48 this bench built `load_policy("tiny")` with the schema's default TinyModelConfig
(4 layers, vocab 2048), a model no experiment trains, where the LM head (the share the learner's response-only head
saves) is half as large: about 1.18 there against 1.04-1.08 on cpu_tiny's policy (process CPU time, 1 thread).

Besides the wall-clock RESULT, INFO lines give the same ratios by process CPU time (what a busy shared machine
inflates least: another process's load slows the wall clock, not this process's CPU seconds) and by matmul FLOPs
counted with torch's FlopCounterMode (exact and load-free; it counts no attention kernel on CPU). The learner's cost
above the KL-free learner is the frozen reference's forward pass (kl_coef != 0): a third of a fwd + bwd.

Usage: .venv/bin/python bench/learner_overhead.py [--samples 32] [--prompt 200] [--response 100] [--device cpu]
       [--experiment cpu_tiny] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from actors.learner import Learner  # noqa: E402
from orchestra.policy.grpo import collate, to_device, token_logprobs  # noqa: E402
from orchestra.types import TrainSample  # noqa: E402


def policy(device: str, experiment: str = "cpu_tiny"):
    """The experiment's policy as `make train` builds it; for a tiny policy whose tokenizer cannot be built here,
    the same architecture (the experiment's TinyModelConfig) with a pad id of 0, said in an INFO line."""
    from orchestra.config import load_config
    from orchestra.policy.models import load_policy_from_config

    m = dataclasses.replace(load_config([f"experiment={experiment}"]).model, device=device)
    try:
        model, tok = load_policy_from_config(m, seed=0)
        return model, tok.pad_token_id, f"{experiment}'s policy ({m.name})"
    except Exception as e:  # e.g. the tokenizer cannot be trained here
        if m.name != "tiny":
            raise
        from transformers import Qwen3Config, Qwen3ForCausalLM

        print(f"INFO {experiment}'s policy failed to load ({type(e).__name__}: {e}); its architecture built here")
        t = m.tiny
        cfg = Qwen3Config(vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                          num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
                          num_key_value_heads=t.num_key_value_heads, head_dim=t.head_dim, tie_word_embeddings=True,
                          pad_token_id=0, attn_implementation="sdpa")
        torch.manual_seed(0)
        return Qwen3ForCausalLM(cfg).to(device).eval(), 0, f"{experiment}'s architecture, built here"


def make_samples(n: int, prompt: int, response: int, vocab: int, seed: int = 0) -> list[TrainSample]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = [rng.randrange(3, vocab) for _ in range(prompt + rng.randint(-20, 20))]
        r = [rng.randrange(3, vocab) for _ in range(response + rng.randint(-10, 10))]
        m = [1] * len(r)
        if i % 3 == 0:
            k = min(8, len(r) - len(r) // 2)
            m[len(r) // 2:len(r) // 2 + k] = [0] * k  # a tool observation inside the response
        out.append(TrainSample(p, r, m, [-5.0] * len(r), advantage=rng.choice([-1.0, -0.3, 0.4, 1.1])))
    return out


class Bare:
    """The baseline: fwd + bwd + AdamW, nothing else. lean=True computes logits only at response positions
    (orchestra.policy.grpo.token_logprobs, as the learner does), to separate the learner's bookkeeping from that gain."""

    def __init__(self, model, lr: float, lean: bool = False):
        self.model, self.lean = model, lean
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr)

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        self.opt.zero_grad(set_to_none=True)
        if self.lean:
            lp = token_logprobs(self.model, batch, 1.0)
            mask = batch["response_mask"]
            (-(lp * batch["advantages"] * mask).sum() / mask.sum()).backward()
            self.opt.step()
            return
        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                            position_ids=batch["position_ids"], use_cache=False).logits
        idx = (batch["response_index"] - 1).clamp(min=0)
        logits = logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1])).float()
        lp = logits.log_softmax(-1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
        mask = batch["response_mask"]
        loss = -(lp * batch["advantages"] * mask).sum() / mask.sum()
        loss.backward()
        self.opt.step()


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=200)
    ap.add_argument("--response", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--experiment", default="cpu_tiny", help="whose policy (conf/experiment/<name>.yaml's model)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, pad, source = policy(args.device, args.experiment)
    samples = make_samples(args.samples, args.prompt, args.response, model.config.vocab_size)
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    print(f"INFO model={source} params={sum(p.numel() for p in model.parameters())} device={args.device} "
          f"threads={torch.get_num_threads()} samples={len(samples)} tokens={tokens}")
    lr, mbs = 1e-5, args.samples  # one micro-batch on both sides
    learner = Learner(copy.deepcopy(model), pad_token_id=pad, lr=lr, kl_coef=1e-4, micro_batch_size=mbs,
                      device=args.device)
    no_kl = Learner(copy.deepcopy(model), pad_token_id=pad, lr=lr, kl_coef=0.0, micro_batch_size=mbs,
                    device=args.device)
    bare = Bare(copy.deepcopy(model), lr)
    lean = Bare(copy.deepcopy(model), lr, lean=True)
    batch = to_device(collate(samples, pad), args.device)

    runs = {"learner": lambda: learner.update(samples), "no_kl": lambda: no_kl.update(samples),
            "bare": lambda: bare.step(batch), "lean": lambda: lean.step(batch)}
    for fn in runs.values():  # warm-up: lazy imports (verl), allocator, kernels
        fn()
    flops = {}
    for name, fn in runs.items():  # one more step each, its matmul and attention FLOPs counted
        with FlopCounterMode(display=False) as counter:
            fn()
        flops[name] = counter.get_total_flops()
    times: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():  # interleaved so machine load hits every side alike
            sync(args.device)
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            sync(args.device)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"INFO median_s learner={med['learner']:.4f} learner_no_kl={med['no_kl']:.4f} bare={med['bare']:.4f} "
          f"bare_response_only_head={med['lean']:.4f}")
    print(f"INFO learner_overhead_no_kl={med['no_kl'] / med['bare']:.3f} "
          f"learner_vs_response_only_bare={med['learner'] / med['lean']:.3f}")
    for what, m in (("cpu_time", med_cpu), ("flops", flops)):
        print(f"INFO by {what}: learner_overhead={m['learner'] / m['bare']:.3f} "
              f"learner_overhead_no_kl={m['no_kl'] / m['bare']:.3f} "
              f"learner_vs_response_only_bare={m['learner'] / m['lean']:.3f}")
    print(f"RESULT learner_overhead={med['learner'] / med['bare']:.3f}")


if __name__ == "__main__":
    main()
