"""The local GRPO learner: a policy, its frozen reference, AdamW, and verl's loss (via orchestra.policy.grpo).

A plain class; `LearnerProcess` (actors/learner_process.py) is the actor's body, which builds a Learner from config
inside the actor's process; cluster/launch.py makes it a Ray actor and moves samples and weights; nothing here imports
ray.
The same code runs on CPU or one GPU (`device`); bf16 autocast is used only on CUDA and only when
`autocast="bfloat16"` is asked for.

One `update` = one optimiser step per PPO epoch over the whole batch (verl's ppo_mini_batch = the batch):
  1. samples are sorted by length and cut into micro-batches of `micro_batch_size` rows and at most
     `micro_batch_tokens` padded tokens when that is > 0 (less padding; a prefix every row of a
     micro-batch shares, the system turn + tool catalogue, is encoded once); the loss normalisers (tokens,
     sequences, horizon) are those of the whole batch, so the summed micro-batch gradients equal one big
     batch's gradient under every loss_agg_mode;
  2. the reference policy's logprobs (no grad) when kl_coef != 0;
  3. old logprobs = the current policy's, before the step (verl's default; rollout logprobs are kept only for
     the rollout-vs-learner mismatch metric). With ppo_epochs == 1 the training forward pass IS that
     computation (same weights, same inputs), so its detached output is used instead of a second forward;
     with ppo_epochs > 1 (or fuse_old_logprobs=False) a separate no-grad pass computes them first;
  4. forward + backward per micro-batch, grad-norm clipping, AdamW step; a non-finite grad norm skips the step
     (as verl does). `version` counts weight changes (RL and SFT steps) for weight sync to rollout engines.
The model is kept in eval mode: dropout would make the old/new ratio differ from 1 at the first step; activation
checkpointing and chunked logits work in it (`gradient_checkpointing`, `logit_chunk_tokens`: orchestra/policy/memory.py).
A peft (LoRA) model trains its adapters only (orchestra/policy/lora.py): the reference is the same model with the
adapter disabled (no copy), `reset_reference` folds the adapter into the base, `get_weights(adapter_only=True)`
sends only A/B matrices, and checkpoints hold the merged model (for evaluation and serving), the base and the
adapter (for resume).
Sampling, rewards and advantages are left to rollout workers and reward/; checkpoint atomicity to the caller.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections import defaultdict
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from orchestra.policy import lora
from orchestra.policy.grpo import check_options, collate, grpo_loss, sft_loss, to_device, token_logprobs
from orchestra.policy.memory import micro_batches
from orchestra.types import TrainSample

OPTIMIZER_FILE, RNG_FILE, STATE_FILE, REF_FILE = "optimizer.pt", "rng_torch.pt", "learner.json", "ref_model.safetensors"
ADAPTER_DIR = "adapter"  # peft policies: the adapter (resume); REF_FILE then holds the base weights


class Learner:
    def __init__(self, model: Any, ref_model: Any = None, *, pad_token_id: int, tokenizer: Any = None,
                 lr: float = 1e-5, sft_lr: float | None = None, weight_decay: float = 0.0,
                 clip_ratio_low: float = 0.2, clip_ratio_high: float = 0.28, clip_ratio_c: float = 3.0,
                 loss_agg_mode: str = "token-mean", kl_type: str = "mse", kl_coef: float = 1e-4,
                 micro_batch_size: int = 32, grad_clip: float = 1.0, ppo_epochs: int = 1, temperature: float = 1.0,
                 max_len: int | None = None, device: str = "cpu", autocast: str = "", compute_entropy: bool = True,
                 fuse_old_logprobs: bool = True, min_shared_prefix: int = 32, gradient_checkpointing: bool = False,
                 logit_chunk_tokens: int = 0, micro_batch_tokens: int = 0, seed: int = 0):
        check_options(loss_agg_mode, kl_type, clip_ratio_c)
        if lr <= 0 or (sft_lr is not None and sft_lr <= 0):
            raise ValueError(f"learning rates must be > 0, got lr={lr}, sft_lr={sft_lr}")
        if micro_batch_size < 1 or ppo_epochs < 1 or logit_chunk_tokens < 0 or micro_batch_tokens < 0:
            raise ValueError(f"micro_batch_size, ppo_epochs must be >= 1, logit_chunk_tokens, micro_batch_tokens >= 0; "
                             f"got {micro_batch_size}, {ppo_epochs}, {logit_chunk_tokens}, {micro_batch_tokens}")
        if autocast not in ("", "bfloat16", "float16"):
            raise ValueError(f"autocast must be '', 'bfloat16' or 'float16', got {autocast!r}")
        # The learner owns its process (a Ray actor): seeding the global streams makes runs repeatable.
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.peft = lora.is_peft(model)
        if ref_model is None and kl_coef != 0.0 and not self.peft:
            ref_model = copy.deepcopy(self.model)  # the reference is the policy as handed to us (after SFT)
        self.ref_model = ref_model.to(self.device).eval() if ref_model is not None else None
        if self.ref_model is not None:
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.tokenizer, self.pad_token_id = tokenizer, int(pad_token_id)
        self.lr, self.sft_lr = lr, sft_lr if sft_lr is not None else lr
        self.clip = dict(clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c,
                         loss_agg_mode=loss_agg_mode, kl_type=kl_type, kl_coef=kl_coef)
        self.loss_agg_mode, self.kl_coef = loss_agg_mode, kl_coef
        self.micro_batch_size, self.micro_batch_tokens = micro_batch_size, micro_batch_tokens
        self.grad_clip, self.ppo_epochs = grad_clip, ppo_epochs
        self.temperature, self.max_len, self.weight_decay = temperature, max_len, weight_decay
        self.autocast = autocast if self.device.type == "cuda" else ""
        self.compute_entropy, self.fuse_old_logprobs = compute_entropy, fuse_old_logprobs
        # how token_logprobs encodes (min_shared_prefix 0: every row whole, orchestra.policy.grpo._hidden) and the
        # memory bounds (orchestra/policy/memory.py); none of them changes a value
        self.encoding = dict(min_shared_prefix=min_shared_prefix, gradient_checkpointing=gradient_checkpointing,
                             logit_chunk_tokens=logit_chunk_tokens)
        self._new_optimizer()
        self.version = 0

    def _new_optimizer(self) -> None:
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=self.lr, weight_decay=self.weight_decay)

    @classmethod
    def from_config(cls, cfg: Any, model: Any, ref_model: Any = None, tokenizer: Any = None) -> Learner:
        """Builder over ExperimentConfig: algo.* for the loss and memory, sampling.temperature, model.device, sft.lr.
        algo.gradient_checkpointing null: on when the learner runs on CUDA (a CPU policy is small)."""
        from orchestra.policy.models import resolve_device

        a, device = cfg.algo, resolve_device(cfg.model.device)
        ckpt = a.gradient_checkpointing if a.gradient_checkpointing is not None else device.startswith("cuda")
        pad = getattr(tokenizer, "pad_token_id", None)
        pad = pad if pad is not None else getattr(model.config, "pad_token_id", None)
        if pad is None:
            raise ValueError("Learner.from_config: no pad_token_id on the tokenizer or the model config")
        return cls(model, ref_model, pad_token_id=pad, tokenizer=tokenizer, lr=a.lr, sft_lr=cfg.sft.lr,
                   weight_decay=a.weight_decay, clip_ratio_low=a.clip_ratio_low, clip_ratio_high=a.clip_ratio_high,
                   clip_ratio_c=a.clip_ratio_c, loss_agg_mode=a.loss_agg_mode, kl_type=a.kl_type,
                   kl_coef=a.kl_coef, micro_batch_size=a.micro_batch_size, grad_clip=a.grad_clip,
                   ppo_epochs=a.ppo_epochs, temperature=cfg.sampling.temperature,
                   max_len=cfg.engine.max_model_len, device=device, gradient_checkpointing=ckpt,
                   logit_chunk_tokens=a.logit_chunk_tokens, micro_batch_tokens=a.micro_batch_tokens, seed=cfg.seed)

    # ------------------------------------------------------------------ batching
    def _micro_batches(self, samples: list[TrainSample]) -> list[dict[str, torch.Tensor]]:
        if not samples:
            raise ValueError("Learner: no samples to train on")
        lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]  # before truncation: a cut row is long
        return [to_device(collate([samples[i] for i in rows], self.pad_token_id, self.max_len), self.device)
                for rows in micro_batches(lengths, self.micro_batch_size, self.micro_batch_tokens)]

    def _normalisers(self, mbs: list[dict[str, torch.Tensor]]) -> dict[str, int | None]:
        """Whole-batch values for agg_loss, so micro-batch losses add up to the one-big-batch loss."""
        masks = [mb["response_mask"] for mb in mbs]
        horizon = max(m.shape[-1] for m in masks)
        return {"batch_num_tokens": int(sum(m.sum().item() for m in masks)),
                "global_batch_size": int(sum((m.sum(-1) > 0).sum().item() for m in masks)),
                "loss_scale_factor": horizon if self.loss_agg_mode == "seq-mean-token-sum-norm" else None}

    def _autocast(self):
        return torch.autocast("cuda", dtype=getattr(torch, self.autocast)) if self.autocast else nullcontext()

    def _logprobs(self, model: Any, mb: dict[str, torch.Tensor], temperature: float, entropy: bool = False):
        with self._autocast():
            return token_logprobs(model, mb, temperature, return_entropy=entropy, **self.encoding)

    def _ref_logprobs(self, mb: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
        if self.peft:
            with self.model.disable_adapter():
                return self._logprobs(self.model, mb, temperature)
        return self._logprobs(self.ref_model, mb, temperature)

    @property
    def has_reference(self) -> bool:
        return self.peft or self.ref_model is not None

    def reset_reference(self) -> None:
        """Make the reference the current policy (after SFT, so KL anchors RL to the warm start). A peft
        policy folds its adapter into the base and gets a fresh adapter (and a fresh optimizer for it)."""
        if self.peft:
            self.model = lora.reattach(self.model).to(self.device).eval()
            self._new_optimizer()
        elif self.ref_model is not None:
            self.ref_model.load_state_dict(self.model.state_dict())

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _step(self) -> tuple[float, bool]:
        """Clip and step; returns (grad norm before clipping, whether the step was taken)."""
        max_norm = self.grad_clip if self.grad_clip and self.grad_clip > 0 else math.inf
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        if not math.isfinite(norm):
            self.optimizer.zero_grad(set_to_none=True)
            return norm, False
        self.optimizer.step()
        return norm, True

    # ------------------------------------------------------------------ training
    def update(self, samples: list[TrainSample]) -> dict[str, float]:
        """One GRPO update on `samples` (see the module docstring). Returns metrics of the first epoch
        (loss, pg_loss, kl, clipfrac, ...; grad_norm of the last epoch)."""
        t0 = time.perf_counter()
        self._set_lr(self.lr)
        mbs = self._micro_batches(samples)
        norms = self._normalisers(mbs)
        n_tokens = norms["batch_num_tokens"]
        out: dict[str, float] = {"tokens": float(n_tokens), "samples": float(len(samples)),
                                 "truncated": float(sum(int(mb["num_truncated"]) for mb in mbs))}
        if n_tokens == 0:  # nothing in the loss (every token masked): no step, no new version
            return {**out, "skipped": 1.0, "version": float(self.version), "time_s": time.perf_counter() - t0}
        t = self.temperature
        refs: list[torch.Tensor | None] = [None] * len(mbs)
        with torch.no_grad():
            if self.has_reference and self.kl_coef != 0.0:
                refs = [self._ref_logprobs(mb, t) for mb in mbs]
            fused = self.fuse_old_logprobs and self.ppo_epochs == 1
            if not fused:
                for mb in mbs:
                    mb["old_logprobs"] = self._logprobs(self.model, mb, t)
        steps_taken = 0
        for epoch in range(self.ppo_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            acc: dict[str, float] = defaultdict(float)
            for mb, ref in zip(mbs, refs, strict=True):
                if self.compute_entropy:
                    lp, ent = self._logprobs(self.model, mb, t, entropy=True)
                else:
                    lp, ent = self._logprobs(self.model, mb, t), None
                if fused:
                    mb["old_logprobs"] = lp.detach()
                loss, m = grpo_loss(lp, mb["old_logprobs"], ref, mb["advantages"], mb["response_mask"],
                                    **self.clip, **norms)
                loss.backward()
                mask = mb["response_mask"]
                share = mask.sum().item() / n_tokens  # per-micro-batch means -> whole-batch token means
                acc["loss"] += loss.detach().item()
                acc["pg_loss"] += m["pg_loss"]
                acc["kl"] += m["kl"]
                for k in ("clipfrac", "clipfrac_lower", "ppo_kl"):
                    acc[k] += m[k] * share
                if ent is not None:
                    acc["entropy"] += (ent * mask).sum().item() / n_tokens
                if epoch == 0:
                    diff = (mb["old_logprobs"] - mb["rollout_logprobs"]).abs() * mask
                    acc["rollout_logprob_diff"] += diff.sum().item() / n_tokens
                    acc["rollout_logprob_diff_max"] = max(acc["rollout_logprob_diff_max"], diff.max().item())
            grad_norm, stepped = self._step()
            steps_taken += int(stepped)
            if epoch == 0:
                out.update(acc)
            out["loss_last_epoch"] = acc["loss"]
            out["grad_norm"] = grad_norm
        if steps_taken:
            self.version += 1
        out.update(skipped=float(steps_taken == 0), version=float(self.version), lr=self.lr,
                   time_s=time.perf_counter() - t0)
        return out

    def sft_update(self, samples: list[TrainSample], lr: float | None = None) -> dict[str, float]:
        """One step of masked cross-entropy (raw logits, temperature 1) on the response tokens in the loss: their
        mean weighted by response_mask (1 for a model token; a demonstration's note may weigh more: sft.note_weight)."""
        t0 = time.perf_counter()
        self._set_lr(lr if lr is not None else self.sft_lr)
        mbs = self._micro_batches(samples)
        n_tokens = int(sum((mb["response_mask"] > 0).sum().item() for mb in mbs))
        weight = float(sum(mb["response_mask"].sum().item() for mb in mbs))
        if n_tokens == 0:
            return {"tokens": 0.0, "skipped": 1.0, "version": float(self.version), "time_s": time.perf_counter() - t0}
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for mb in mbs:
            lp = self._logprobs(self.model, mb, 0.0)
            loss = sft_loss(lp, mb["response_mask"], weight)
            loss.backward()
            total += loss.detach().item()
        grad_norm, stepped = self._step()
        if stepped:
            self.version += 1
        return {"sft_loss": total, "grad_norm": grad_norm, "tokens": float(n_tokens), "skipped": float(not stepped),
                "version": float(self.version), "time_s": time.perf_counter() - t0}

    # ------------------------------------------------------------------ weights and checkpoints
    def get_weights(self, adapter_only: bool = False) -> tuple[int, dict[str, Any]]:
        """(version, a CPU copy of the policy's state dict) for HFEngine.load_weights(sd, version). A peft
        policy gives its base weights plus the adapter payload, or with `adapter_only` the payload alone
        (orchestra/policy/lora.py: the receiver merges it into the base of its last full load)."""
        if self.peft:
            payload = lora.adapter_payload(self.model)
            return self.version, payload if adapter_only else {**lora.base_state_dict(self.model), **payload}
        return self.version, {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save(self, directory: str | Path) -> None:
        """Write model (save_pretrained, safetensors; tokenizer too if given), reference weights, optimizer,
        RNG states and version into `directory` (made if missing; the caller makes the write atomic)."""
        from safetensors.torch import save_model

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if self.peft:  # merged weights load like any HF checkpoint; base + adapter rebuild the learner
            from safetensors.torch import save_file

            base = self.model.get_base_model()
            base.config.save_pretrained(d)
            if getattr(base, "generation_config", None) is not None:
                base.generation_config.save_pretrained(d)
            save_file(lora.merged_state_dict(self.model), str(d / "model.safetensors"), metadata={"format": "pt"})
            save_file(lora.base_state_dict(self.model), str(d / REF_FILE), metadata={"format": "pt"})
            self.model.save_pretrained(d / ADAPTER_DIR)
        else:
            self.model.save_pretrained(d, safe_serialization=True)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(d)
        if self.ref_model is not None:
            save_model(self.ref_model, str(d / REF_FILE))  # the reference is not recoverable from the policy
        torch.save(self.optimizer.state_dict(), d / OPTIMIZER_FILE)
        rng = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.stack(torch.cuda.get_rng_state_all())
        torch.save(rng, d / RNG_FILE)
        py_state = random.getstate()
        np_state = np.random.get_state()
        state = {"version": self.version, "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
                 "numpy_rng": [np_state[0], np_state[1].tolist(), *[float(x) for x in np_state[2:]]]}
        (d / STATE_FILE).write_text(json.dumps(state))

    def load(self, directory: str | Path) -> None:
        """Restore everything `save` wrote, in place (the model object stays the same)."""
        d = Path(directory)
        if not (d / STATE_FILE).is_file():
            raise FileNotFoundError(f"{d} is not a learner checkpoint (no {STATE_FILE})")
        if self.peft:
            self._load_peft(d)
        else:
            self._load_full(d)
        self.optimizer.load_state_dict(torch.load(d / OPTIMIZER_FILE, map_location=self.device, weights_only=True))
        rng = torch.load(d / RNG_FILE, weights_only=True)
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(list(rng["cuda"]))
        state = json.loads((d / STATE_FILE).read_text())
        py = state["python_rng"]
        random.setstate((py[0], tuple(py[1]), py[2]))
        npy = state["numpy_rng"]
        np.random.set_state((npy[0], np.array(npy[1], dtype=np.uint32), int(npy[2]), int(npy[3]), npy[4]))
        self.version = int(state["version"])

    def _load_full(self, d: Path) -> None:
        from safetensors.torch import load_file, load_model

        from orchestra.policy.models import check_loaded_keys

        shards = sorted(d.glob("model*.safetensors"))
        if not shards:
            raise FileNotFoundError(f"{d}: no model*.safetensors")
        sd: dict[str, torch.Tensor] = {}
        for shard in shards:
            sd.update(load_file(str(shard), device=str(self.device)))
        check_loaded_keys(self.model, self.model.load_state_dict(sd, strict=False), set(sd))
        if self.ref_model is not None:
            if not (d / REF_FILE).is_file():
                raise FileNotFoundError(f"{d}: this learner has a reference model but the checkpoint has none")
            load_model(self.ref_model, str(d / REF_FILE), device=str(self.device))

    def _load_peft(self, d: Path) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        adapter = d / ADAPTER_DIR / "adapter_model.safetensors"
        if not adapter.is_file() or not (d / REF_FILE).is_file():
            raise FileNotFoundError(f"{d}: a LoRA learner needs {ADAPTER_DIR}/ and {REF_FILE} (base weights); "
                                    "was it written by a learner without model.lora?")
        lora.load_base(self.model, load_file(str(d / REF_FILE)))
        result = set_peft_model_state_dict(self.model, load_file(str(adapter), device=str(self.device)))
        if getattr(result, "unexpected_keys", None):
            raise ValueError(f"{adapter} does not match this adapter: unexpected {list(result.unexpected_keys)[:5]}")

