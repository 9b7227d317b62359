"""What bounds the local learner's memory: micro-batches cut by a token budget, activation checkpointing per
decoder layer, and logits computed a chunk of response tokens at a time. None of them changes a value (tests:
tests/orchestra/policy/test_memory.py); they trade compute (a recomputed forward) or larger launches for memory,
so the tiny CPU policy runs without them (`algo.*`, docs/configuration.md, docs/engines.md).

- `micro_batches`: samples sorted by length, cut into micro-batches of at most `max_rows` rows and, with a token
  budget, at most that many padded tokens (rows x the longest row: what a right-padded batch costs); a row
  longer than the budget goes alone. verl's `use_dynamic_bsz` / `ppo_max_token_len_per_gpu` is the precedent.
- `checkpointing`: within it, every decoder layer (transformers' `GradientCheckpointingLayer`) runs under
  `torch.utils.checkpoint` (non-reentrant), so the backward keeps each layer's input, not its activations, and
  recomputes them. transformers' own `gradient_checkpointing_enable` engages only in train mode, where dropout
  (LoRA's included) would make the first step's old/new ratio differ from 1, and it drops a passed KV cache,
  which the shared-prefix encoding needs (orchestra/policy/grpo.py `_hidden`). Ours works in eval mode, keeps
  the cache, and needs no input that requires grad (so peft's frozen embeddings are fine).
- `prefix_view`: the shared prefix's KV cache as the rows' forward reads it: expanded over the rows, and never
  extended, so a checkpointed layer recomputed in the backward sees the keys its forward saw.
- `chunked_logprobs`: log-softmax, the chosen token's logprob and the entropy over the valid response tokens,
  `chunk` tokens at a time; each chunk is checkpointed when gradients are on, so the backward holds one
  chunk's (chunk x vocab) fp32 logits at a time instead of every response token's.
Which rows, losses and optimiser steps are left to actors/learner.py; the model's forward to grpo.py.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint


def micro_batches(lengths: list[int], max_rows: int, max_tokens: int = 0) -> list[list[int]]:
    """Indices into `lengths`, shortest first, cut into micro-batches (see the module docstring). With
    `max_tokens` 0 this is plain slicing into `max_rows` rows of the sorted order."""
    if max_rows < 1 or max_tokens < 0:
        raise ValueError(f"micro_batches: max_rows must be >= 1 and max_tokens >= 0, got {max_rows}, {max_tokens}")
    out: list[list[int]] = []
    cur: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda k: lengths[k]):  # stable: equal lengths keep their order
        # sorted ascending, so row i is the longest of the micro-batch it joins
        if cur and (len(cur) >= max_rows or (max_tokens and (len(cur) + 1) * lengths[i] > max_tokens)):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def _decoder_layers(model: Any) -> list[torch.nn.Module]:
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    if not layers:
        raise ValueError(f"gradient checkpointing: {type(model).__name__} has no transformers decoder layers "
                         "(GradientCheckpointingLayer) to checkpoint")
    return layers


@contextmanager
def checkpointing(model: Any, on: bool = True) -> Iterator[None]:
    """Within: `model`'s decoder layers run checkpointed, when `on` and gradients are enabled (a no-grad pass
    keeps no activations anyway). The layers' `forward` is wrapped for the duration only: nothing is left on
    the model (deepcopy, save_pretrained and peft's merge see it as it was)."""
    if not on or not torch.is_grad_enabled():
        yield
        return
    patched = []
    for layer in _decoder_layers(model):
        own = layer.__dict__.get("forward")  # an instance-level forward (rare: accelerate hooks) is kept
        inner = own if own is not None else type(layer).forward.__get__(layer)

        def run(*args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            # non-reentrant: kwargs pass through, and gradients reach tensors the layer reads from outside its
            # arguments (a shared prefix's keys and values in the cache object)
            return checkpoint(_inner, *args, use_reentrant=False, **kwargs)

        layer.forward = run
        patched.append((layer, own))
    try:
        yield
    finally:
        for layer, own in patched:
            if own is None:
                del layer.forward
            else:
                layer.forward = own


def prefix_view(cache: Any, rows: int) -> Any:
    """A cache holding `cache`'s keys and values repeated over `rows` rows, whose `update` returns prefix + new
    keys without storing them. The rows' forward needs nothing stored (only its hidden states are used), and
    a forward that stores nothing can run twice, as a checkpointed layer does, with the same result. `cache`
    itself is emptied: a checkpointed layer of the prefix's own forward, recomputed in the backward, appends
    its keys to it again and must find it as that forward did."""
    view = copy.copy(cache)
    view.layers = [copy.copy(layer) for layer in cache.layers]
    view.batch_repeat_interleave(rows)
    cache.crop(0)
    # a partial over the layer list, not a closure over `view`: view -> update -> view is a reference cycle that
    # kept every layer's repeated prefix alive until the cyclic GC ran (a GRPO step's peak on CPU, 16 rows sharing
    # a 384-token prefix: 249 MiB with the cycle, 237 without, as before prefix_view; bench/gpu_smoke.py's learner
    # peak on one H200 rose from 28.1 to 32.7 GiB with it)
    view.update = functools.partial(_view_update, view.layers)
    return view


def _view_update(layers: list[Any], key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
                 *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    layer = layers[layer_idx]
    return torch.cat([layer.keys, key_states], dim=-2), torch.cat([layer.values, value_states], dim=-2)


def _chunk(head: Any, temperature: float, want_entropy: bool, hidden: torch.Tensor, targets: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    logits = head(hidden).float()  # log-softmax in fp32 even under bf16 autocast
    if temperature > 0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - logz
    entropy = None
    if want_entropy:
        with torch.no_grad():
            entropy = logz - (torch.softmax(logits, dim=-1) * logits).sum(-1)
    return lp, entropy


def chunked_logprobs(hidden: torch.Tensor, head: Any, targets: torch.Tensor, valid: torch.Tensor,
                     temperature: float, chunk: int, return_entropy: bool = False
                     ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """(B, R) logprobs of `targets` from (B, R, H) `hidden` through the LM `head`, 0 where `valid` is False; with
    return_entropy also the (B, R) entropy, detached. Only valid positions are computed, `chunk` at a time."""
    h, t = hidden[valid], targets[valid]  # (N, H), (N,): padding costs nothing
    recompute = torch.is_grad_enabled() and h.requires_grad and h.shape[0] > chunk
    lps, ents = [], []
    for i in range(0, h.shape[0], chunk):
        args = (head, temperature, return_entropy, h[i:i + chunk], t[i:i + chunk])
        # the entropy (a no-grad metric) is computed again in the recompute: a V-sized softmax, cheap beside
        # the head's matmul
        lp, ent = checkpoint(_chunk, *args, use_reentrant=False) if recompute else _chunk(*args)
        lps.append(lp)
        ents.append(ent)
    shape = targets.shape
    lp = torch.zeros(shape, dtype=torch.float32, device=hidden.device)
    lp = lp.masked_scatter(valid, torch.cat(lps)) if lps else lp
    if not return_entropy:
        return lp
    entropy = torch.zeros(shape, dtype=torch.float32, device=hidden.device)
    return lp, entropy.masked_scatter(valid, torch.cat(ents)) if ents else entropy
