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

Usage: .venv/bin/python bench/learner_overhead.py [--samples 32] [--prompt 200] [--response 100] [--device cpu]
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
from orchestra.policy.grpo import collate, to_device, token_logprobs  # noqa: E402
from orchestra.types import TrainSample  # noqa: E402


def policy(device: str):
    """The project's tiny policy when orchestra.policy.models can build it, else an equivalent Qwen3 built here."""
    try:
        from orchestra.policy.models import load_policy

        model, tok = load_policy("tiny", device=device, seed=0)
        return model, tok.pad_token_id, "orchestra.policy.models tiny"
    except Exception as e:  # e.g. the tokenizer cannot be trained here
        from transformers import Qwen3Config, Qwen3ForCausalLM

        print(f"INFO load_policy('tiny') failed ({type(e).__name__}: {e}); using a local Qwen3Config")
        cfg = Qwen3Config(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
                          pad_token_id=0, attn_implementation="sdpa")
        torch.manual_seed(0)
        return Qwen3ForCausalLM(cfg).to(device).eval(), 0, "local Qwen3Config"


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
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, pad, source = policy(args.device)
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
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for name, fn in runs.items():  # interleaved so machine load hits every side alike
            sync(args.device)
            t0 = time.perf_counter()
            fn()
            sync(args.device)
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"INFO median_s learner={med['learner']:.4f} learner_no_kl={med['no_kl']:.4f} bare={med['bare']:.4f} "
          f"bare_response_only_head={med['lean']:.4f}")
    print(f"INFO learner_overhead_no_kl={med['no_kl'] / med['bare']:.3f} "
          f"learner_vs_response_only_bare={med['learner'] / med['lean']:.3f}")
    print(f"RESULT learner_overhead={med['learner'] / med['bare']:.3f}")


if __name__ == "__main__":
    main()
