"""GRPO math for the local learner, in plain torch: training samples -> padded tensors -> per-token logprobs -> loss.

- `TrainSample` (orchestra/types.py): one turn (reprompt) or one episode (transcript) with its advantage.
- `collate`: samples -> a dict of tensors. Layout: each row is `prompt + response` contiguous, then right-padded
  to the longest row (less padding than verl's left-padded prompt block when reprompt prompts vary in length);
  `response_index` says where each response token sits in `input_ids`, so no row needs a common prompt length.
  Truncation (only when `max_len` is given): the response is kept from its start and cut on the right to at most
  `max_len - 1` tokens, then the prompt is cut on the LEFT (oldest context first) to fit; `num_truncated` counts
  rows that were cut. A cut prompt changes the conditioning, so callers should size `max_len` to avoid it.
- `token_logprobs`: log p(response token) under `model` with logits / temperature (temperature <= 0: raw
  logits), computed only at response positions (hidden states are gathered before the LM head, so a
  50k-vocab model never materialises logits for prompt tokens); a prefix shared by the whole micro-batch (the
  system turn and tool catalogue) can be encoded once, exactly (`min_shared_prefix`); activation checkpointing
  and logits in chunks of response tokens bound its memory (orchestra/policy/memory.py).
- `grpo_loss`: verl 0.9.1's own `core_algos` (the "vanilla" clipped / dual-clip policy loss, `kl_penalty`,
  `agg_loss`), so the local and verl backends optimise the same objective. verl is imported lazily: importing
  it pulls in ray and tensordict (~8 s), which `import orchestra` must not do.

Running the optimiser, micro-batching and checkpoints are left to actors/learner.py; advantages to reward/.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from orchestra.policy import memory
from orchestra.types import TrainSample

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def collate(samples: list[TrainSample], pad_id: int, max_len: int | None = None) -> dict[str, torch.Tensor]:
    """Pad `samples` into tensors (see the module docstring for the layout and the truncation policy)."""
    if not samples:
        raise ValueError("collate: no samples")
    if max_len is not None and max_len < 2:
        raise ValueError(f"collate: max_len must be >= 2, got {max_len}")
    rows, truncated = [], 0
    for s in samples:
        p, r, m, lp = s.prompt_ids, s.response_ids, s.response_mask, s.logprobs
        if max_len is not None and len(p) + len(r) > max_len:
            truncated += 1
            keep = min(len(r), max_len - 1)
            r, m, lp = r[:keep], m[:keep], lp[:keep]
            p = p[len(p) - (max_len - keep):]
        rows.append((p, r, m, lp, s.advantage))
    B = len(rows)
    L = max(len(p) + len(r) for p, r, *_ in rows)
    R = max(1, max(len(r) for _, r, *_ in rows))
    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, L), dtype=torch.long)
    responses = torch.full((B, R), pad_id, dtype=torch.long)
    response_mask = torch.zeros((B, R), dtype=torch.float32)
    response_index = torch.full((B, R), L - 1, dtype=torch.long)
    logprobs = torch.zeros((B, R), dtype=torch.float32)
    advantages = torch.zeros((B, R), dtype=torch.float32)
    prompt_lengths = torch.zeros(B, dtype=torch.long)
    response_lengths = torch.zeros(B, dtype=torch.long)
    for b, (p, r, m, lp, adv) in enumerate(rows):
        n, k = len(p), len(r)
        input_ids[b, :n + k] = torch.tensor(p + r, dtype=torch.long)
        attention_mask[b, :n + k] = 1
        prompt_lengths[b], response_lengths[b] = n, k
        if k:
            responses[b, :k] = torch.tensor(r, dtype=torch.long)
            response_mask[b, :k] = torch.tensor(m, dtype=torch.float32)
            response_index[b, :k] = torch.arange(n, n + k)
            logprobs[b, :k] = torch.tensor(lp, dtype=torch.float32)
            advantages[b, :k] = float(adv)
    # verl's formula; with right padding it is arange over the real tokens.
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
            "responses": responses, "response_mask": response_mask, "response_index": response_index,
            "rollout_logprobs": logprobs, "old_logprobs": logprobs.clone(), "advantages": advantages,
            "prompt_lengths": prompt_lengths, "response_lengths": response_lengths,
            "num_truncated": torch.tensor(truncated)}


def to_device(batch: dict[str, torch.Tensor], device: str | torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def shared_prefix_len(batch: dict[str, torch.Tensor]) -> int:
    """Length of the token prefix every row shares (each row keeps >= 1 prompt token of its own)."""
    ids = batch["input_ids"]
    if ids.shape[0] < 2:
        return 0
    same = (ids == ids[:1]).all(0).long()
    n = int(same.cumprod(0).sum())
    return max(0, min(n, int(batch["prompt_lengths"].min()) - 1))


def _hidden(base: Any, batch: dict[str, torch.Tensor], min_shared: int) -> tuple[torch.Tensor, int]:
    """(last hidden states of the rows' tokens after the shared prefix, that prefix's length). A prefix common
    to every row (system prompt + tool catalogue: most of a reprompt prompt) is encoded once and its KV cache
    expanded over the rows (`memory.prefix_view`); gradients flow back through the expansion into that one
    encoding, so logprobs and gradients are the ones of encoding every row whole, with or without activation
    checkpointing (tests/orchestra/policy/test_grpo.py and test_memory.py check both)."""
    n = shared_prefix_len(batch) if min_shared > 0 else 0
    if n == 0 or n < min_shared:
        return base(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    position_ids=batch["position_ids"], use_cache=False).last_hidden_state, 0
    rows = batch["input_ids"].shape[0]
    head = base(input_ids=batch["input_ids"][:1, :n], position_ids=batch["position_ids"][:1, :n], use_cache=True)
    cache = memory.prefix_view(head.past_key_values, rows)
    out = base(input_ids=batch["input_ids"][:, n:], attention_mask=batch["attention_mask"],
               position_ids=batch["position_ids"][:, n:], past_key_values=cache, use_cache=True)
    return out.last_hidden_state, n


def _response_hidden(model: Any, batch: dict[str, torch.Tensor], min_shared: int = 0
                     ) -> tuple[torch.Tensor, Any]:
    """((B, R, H) hidden states predicting each response token (position i - 1 predicts token i), the LM head).
    A model without the usual base/head split gives its (B, R, V) logits and head None. `min_shared` > 0: a
    prefix shared by every row, if at least that long, is encoded once (`_hidden`)."""
    idx = (batch["response_index"] - 1).clamp(min=0)
    if hasattr(model, "get_base_model") and hasattr(model, "peft_config"):
        # peft: the wrapped HF model carries the injected adapters (and honours disable_adapter)
        model = model.get_base_model()
    base, head = getattr(model, "base_model", None), model.get_output_embeddings()
    if base is not None and base is not model and head is not None:
        hidden, n = _hidden(base, batch, min_shared)
        idx = idx - n  # response positions lie after the shared prefix (it ends inside every prompt)
        return hidden.gather(1, idx.unsqueeze(-1).expand(-1, -1, hidden.shape[-1])), head
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   position_ids=batch["position_ids"], use_cache=False).logits  # full logits, then gather
    return logits.gather(1, idx.unsqueeze(-1).expand(-1, -1, logits.shape[-1])), None


def token_logprobs(model: Any, batch: dict[str, torch.Tensor], temperature: float = 1.0,
                   return_entropy: bool = False, min_shared_prefix: int = 0, logit_chunk_tokens: int = 0,
                   gradient_checkpointing: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(B, R) logprobs of `batch["responses"]` (0 on padding). With return_entropy, also the (B, R) entropy of
    the tempered distribution, detached (a metric, computed from the same logits). `min_shared_prefix` > 0
    encodes a prefix common to every row once when it is at least that long (same values, less compute).
    Memory (orchestra/policy/memory.py; same values): `gradient_checkpointing` recomputes each decoder layer's
    activations in the backward; `logit_chunk_tokens` > 0 bounds the logits to that many response tokens at a
    time once B x R exceeds it (below, the one-pass computation here is both exact and as small)."""
    with memory.checkpointing(model, gradient_checkpointing):
        hidden, head = _response_hidden(model, batch, min_shared_prefix)
    responses = batch["responses"]
    steps = torch.arange(responses.shape[-1], device=responses.device)
    valid = steps.unsqueeze(0) < batch["response_lengths"].unsqueeze(-1)  # False on padding
    if head is not None and 0 < logit_chunk_tokens < valid.numel():
        return memory.chunked_logprobs(hidden, head, responses, valid, temperature, logit_chunk_tokens,
                                       return_entropy)
    logits = (head(hidden) if head is not None else hidden).float()  # log-softmax in fp32 even under bf16 autocast
    if temperature > 0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    chosen = logits.gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    lp = torch.where(valid, chosen - logz, torch.zeros_like(chosen))
    if not return_entropy:
        return lp
    with torch.no_grad():
        probs = torch.softmax(logits, dim=-1)
        entropy = torch.where(valid, logz - (probs * logits).sum(-1), torch.zeros_like(logz))
    return lp, entropy


@functools.lru_cache(maxsize=1)
def _verl() -> tuple[Any, Any]:
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig

    return core_algos, ActorConfig


def check_options(loss_agg_mode: str, kl_type: str, clip_ratio_c: float) -> None:
    """Clear errors before verl's asserts (shared with the learner's constructor)."""
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode must be one of {LOSS_AGG_MODES}, got {loss_agg_mode!r}")
    if kl_type.rstrip("+") not in KL_TYPES:
        raise ValueError(f"kl_type must be one of {KL_TYPES} (optionally with '+'), got {kl_type!r}")
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c (dual clip) must be > 1, got {clip_ratio_c}")


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor | None,
              advantages: torch.Tensor, response_mask: torch.Tensor, clip_ratio_low: float = 0.2,
              clip_ratio_high: float = 0.28, clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean",
              kl_type: str = "mse", kl_coef: float = 1e-4, *, batch_num_tokens: int | None = None,
              global_batch_size: int | None = None,
              loss_scale_factor: int | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's clipped policy loss + kl_coef * agg(kl_penalty(logprobs, ref_logprobs)), as verl's actor adds it.

    All tensors are (B, T); `advantages` may be (B,) (one per sample, broadcast). The three keyword-only
    normalisers describe the whole batch when this call sees one micro-batch of it (verl's global_batch_info):
    with them, summing the micro-batch losses gives exactly the one-big-batch loss. None: this call is the batch.
    ref_logprobs None or kl_coef 0: no KL term. Metrics are floats: pg_loss, kl, clipfrac, clipfrac_lower, ppo_kl.
    """
    check_options(loss_agg_mode, kl_type, clip_ratio_c)
    core_algos, ActorConfig = _verl()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1).expand_as(logprobs)
    info = {"dp_size": 1, "batch_num_tokens": batch_num_tokens, "global_batch_size": global_batch_size,
            "loss_scale_factor": loss_scale_factor}
    # A real verl ActorConfig: whatever the vanilla loss reads (clip ratios, clip_ratio_c, global_batch_info)
    # comes from the same class verl's own trainer passes. micro_batch_size is required but unused here.
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=clip_ratio_low,
                         clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high, clip_ratio_c=clip_ratio_c,
                         loss_agg_mode=loss_agg_mode, global_batch_info=info)
    policy_loss_fn = core_algos.get_policy_loss_fn("vanilla")
    pg_loss, pg_metrics = policy_loss_fn(old_log_prob=old_logprobs, log_prob=logprobs, advantages=advantages,
                                         response_mask=response_mask, loss_agg_mode=loss_agg_mode, config=config)
    loss = pg_loss
    kl_value = 0.0
    if ref_logprobs is not None and kl_coef != 0.0:
        kld = core_algos.kl_penalty(logprob=logprobs, ref_logprob=ref_logprobs, kl_penalty=kl_type)
        kl_loss = core_algos.agg_loss(loss_mat=kld, loss_mask=response_mask, loss_agg_mode=loss_agg_mode, **info)
        loss = loss + kl_coef * kl_loss
        kl_value = kl_loss.detach().item()
    metrics = {"pg_loss": pg_loss.detach().item(), "kl": kl_value,
               "clipfrac": pg_metrics["actor/pg_clipfrac"], "clipfrac_lower": pg_metrics["actor/pg_clipfrac_lower"],
               "ppo_kl": pg_metrics["actor/ppo_kl"]}
    return loss, metrics


def sft_loss(logprobs: torch.Tensor, response_mask: torch.Tensor,
             batch_num_tokens: float | None = None) -> torch.Tensor:
    """Token-mean cross-entropy, each token weighted by its mask (0: out of the loss); `batch_num_tokens` (the batch's
    summed mask) normalises a micro-batch by the batch."""
    n = batch_num_tokens if batch_num_tokens is not None else response_mask.sum().clamp(min=1)
    return -(logprobs * response_mask).sum() / n
