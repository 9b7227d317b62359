"""Per-episode KV-cache reuse for the HF engine: finished rows' caches, found again by token prefix.

When a row of a batch finishes, its KV cache (prompt + generated tokens, bar the last one, which was never fed
to the model) is kept here, keyed by those token ids. A later request whose prompt starts with the same ids —
the episode's next turn: in transcript mode the whole history, in reprompt mode the system prompt + problem
before the first per-turn line — takes that cache and the engine feeds only the new tokens. No episode id is
needed: the match is by tokens, so a cache can only ever be reused for exactly the ids it was computed from.

Lookup hashes the prompt in 16-token blocks, each hash chained to the previous (like vLLM's prefix caching),
so finding the longest stored prefix costs one pass over the prompt, not one per entry. An entry is *taken*
(removed) by the request that reuses it: the row that continues from it stores a longer one when it ends, so an
episode holds at most one entry. Entries go when the episode ends (`release`), when weights change (`clear`:
a cache computed under old weights is not the new policy's), and least recently stored first past `max_bytes`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer

BLOCK = 16  # tokens per hashed block; also the shortest prefix worth reusing


def block_hashes(ids: list[int], limit: int) -> list[int]:
    """Chained hashes of the full BLOCK-token blocks within ids[:limit]."""
    out: list[int] = []
    h = 0
    for start in range(0, limit - BLOCK + 1, BLOCK):
        h = hash((h, tuple(ids[start:start + BLOCK])))
        out.append(h)
    return out


@dataclass
class _Entry:
    ids: list[int]
    kv: list[tuple[Any, Any]]  # per layer (keys, values), each [kv_heads, len(ids), head_dim]
    hashes: list[int]
    nbytes: int


class PrefixStore:
    """Thread-safe: the engine's worker thread stores and takes, the event loop releases."""

    def __init__(self, max_bytes: int):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # insertion order = eviction order
        self._index: dict[int, set[int]] = {}  # block hash -> ids of entries holding that block
        self._next = 0
        self._lock = threading.Lock()
        self.bytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def put(self, ids: list[int], kv: list[tuple[Any, Any]]) -> None:
        """Keep `kv` (covering exactly `ids`) for reuse; evicts the oldest entries past the memory cap."""
        if len(ids) < BLOCK or not self.enabled:
            return
        nbytes = sum(t.element_size() * t.numel() for pair in kv for t in pair)
        if nbytes > self.max_bytes:
            return
        with self._lock:
            key, self._next = self._next, self._next + 1
            entry = _Entry(list(ids), kv, block_hashes(ids, len(ids)), nbytes)
            self._entries[key] = entry
            for h in entry.hashes:
                self._index.setdefault(h, set()).add(key)
            self.bytes += nbytes
            while self.bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
                self.evicted += 1

    def take(self, prompt: list[int]) -> tuple[list[tuple[Any, Any]], int] | None:
        """The stored cache sharing the longest prefix with `prompt` (at least BLOCK tokens, at most
        len(prompt) - 1 so the prompt keeps a token to produce logits from), cut to that prefix, and removed
        from the store. None when nothing matches."""
        if not self._entries:
            return None
        limit = len(prompt) - 1
        with self._lock:
            candidates: set[int] = set()
            depth = 0
            for h in block_hashes(prompt, limit):
                found = self._index.get(h)
                if not found:
                    break
                candidates, depth = found, depth + 1
            if not depth:
                return None
            key = max(candidates)  # the most recently stored of the equally deep matches
            entry = self._entries[key]
            n = depth * BLOCK
            if entry.ids[:n] != prompt[:n]:  # a hash collision: never reuse a cache for other tokens
                return None
            stop = min(len(entry.ids), limit)
            while n < stop and entry.ids[n] == prompt[n]:
                n += 1
            self._drop(key)
        return [(k[:, :n], v[:, :n]) for k, v in entry.kv], n

    def release(self, ids: list[int]) -> int:
        """Forget the entry stored from `ids` (an episode's last prompt + response, which ended the episode):
        entries whose ids are `ids` up to the response's last token. Returns how many went."""
        if not self._entries:
            return 0
        gone = 0
        with self._lock:
            hashes = block_hashes(ids, len(ids) - 1)  # the blocks every entry stored from `ids` holds
            if not hashes:
                return 0
            for key in list(self._index.get(hashes[-1], ())):
                entry = self._entries[key]
                if len(entry.ids) >= len(ids) - 1 and ids[:len(entry.ids)] == entry.ids:
                    self._drop(key)
                    gone += 1
        return gone

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._index.clear()
            self.bytes = 0

    def _drop(self, key: int) -> None:  # caller holds the lock
        entry = self._entries.pop(key)
        self.bytes -= entry.nbytes
        for h in entry.hashes:
            held = self._index.get(h)
            if held is not None:
                held.discard(key)
                if not held:
                    del self._index[h]


class GrowingLayer(DynamicLayer):
    """A full-attention cache layer with spare room: new keys/values are written in place and `keys`/`values`
    are views of the filled part. HF's DynamicLayer concatenates the whole cache at every decode step, which is
    about two thirds of a decode step's time for a small model on CPU (and grows with the context)."""

    SPARE = 64  # tokens of room added beyond a fill; growth doubles, so appends are amortised O(1) per token

    def _fill(self, keys: torch.Tensor, values: torch.Tensor, spare: int) -> None:
        rows, heads, n, dim = keys.shape
        k = keys.new_empty((rows, heads, n + spare, dim))
        v = values.new_empty((rows, values.shape[1], n + spare, values.shape[-1]))
        k[:, :, :n], v[:, :, :n] = keys, values
        self._adopt(k, v, n)

    def _adopt(self, k: torch.Tensor, v: torch.Tensor, n: int) -> None:
        """Take buffers whose first n positions are filled as this layer's storage, without a copy."""
        if not self.is_initialized:
            self.lazy_initialization(k, v)
        self._k, self._v, self._n = k, v, n
        self.keys, self.values = k[:, :, :n], v[:, :, :n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._fill(key_states, value_states, self.SPARE)
            return self.keys, self.values
        n, add = self._n, key_states.shape[-2]
        if n + add > self._k.shape[-2]:
            self._fill(self.keys, self.values, max(n, add, self.SPARE))
        self._k[:, :, n:n + add], self._v[:, :, n:n + add] = key_states, value_states
        self._n = n + add
        self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._k, self._v = self._k[indices], self._v[indices]
            self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._fill(self.keys.repeat_interleave(repeats, 0), self.values.repeat_interleave(repeats, 0),
                       self.SPARE)

    def crop(self, max_length: int) -> None:
        if self.is_initialized:
            self._n = min(self._n, max_length if max_length >= 0 else self._n + max_length)
            self.keys, self.values = self._k[:, :, :self._n], self._v[:, :, :self._n]


def new_cache(layers: list[tuple[Any, Any]] | None = None, filled: int | None = None) -> Any:
    """A DynamicCache of GrowingLayers: empty (filled by the first forward), or holding per-layer (keys, values).
    With `filled`, those are buffers with room to grow whose first `filled` positions hold the cache: they are
    taken as they are, not copied."""
    cache = DynamicCache.__new__(DynamicCache)  # a DynamicCache to the model, with other layers inside
    if layers is None:
        Cache.__init__(cache, layer_class_to_replicate=GrowingLayer)
        return cache
    built = []
    for keys, values in layers:
        layer = GrowingLayer()
        if filled is None:
            layer.update(keys, values)
        else:
            layer._adopt(keys, values, filled)
        built.append(layer)
    Cache.__init__(cache, layers=built)
    return cache


def _buffer(like: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """Zeros for `rows` rows of `width` positions shaped like a [heads, n, dim] cache, with GrowingLayer's room."""
    return torch.zeros((rows, like.shape[-3], width + GrowingLayer.SPARE, like.shape[-1]), dtype=like.dtype,
                       device=like.device)


def merge_left_padded(prefixes: list[tuple[list[tuple[Any, Any]] | None, int]]) -> tuple[Any, Any, int]:
    """One batch cache from per-row prefix caches (at least one non-empty): the first n positions of row i's
    cache right-aligned in a [rows, kv_heads, width, head_dim] tensor per layer (zeros on the left, masked out).
    Returns (DynamicCache, its attention mask [rows, width], width)."""
    width = max(n for _, n in prefixes)
    first = next(kv for kv, n in prefixes if n)
    mask = torch.zeros((len(prefixes), width), dtype=torch.long, device=first[0][0].device)
    layers = []
    for layer, (k0, v0) in enumerate(first):
        keys, values = _buffer(k0, len(prefixes), width), _buffer(v0, len(prefixes), width)
        for i, (kv, n) in enumerate(prefixes):
            if n:
                keys[i, :, width - n:width] = kv[layer][0][:, :n]
                values[i, :, width - n:width] = kv[layer][1][:, :n]
        layers.append((keys, values))
    for i, (_, n) in enumerate(prefixes):
        if n:
            mask[i, width - n:] = 1
    return new_cache(layers, filled=width), mask, width


def join_batches(a: Any, mask_a: Any, b: Any, mask_b: Any) -> tuple[Any, Any]:
    """Batch cache `b`'s rows under `a`'s, both right-aligned to the wider (zeros on the left, masked out): a
    running batch with new rows joined. Each cache's length must equal its mask's width."""
    (ra, na), (rb, nb) = mask_a.shape, mask_b.shape
    width, pad = max(na, nb), torch.nn.functional.pad
    layers = []
    for la, lb in zip(a.layers, b.layers, strict=True):
        if (la.keys.shape[-2], lb.keys.shape[-2]) != (na, nb):
            raise ValueError(f"cache lengths {la.keys.shape[-2]}, {lb.keys.shape[-2]} do not match mask widths {na}, "
                             f"{nb}")
        joined = []
        for ta, tb in ((la.keys, lb.keys), (la.values, lb.values)):
            buf = _buffer(ta[0], ra + rb, width)  # written once, straight into the joined layer's storage
            buf[:ra, :, width - na:width], buf[ra:, :, width - nb:width] = ta, tb
            joined.append(buf)
        layers.append(tuple(joined))
    mask = torch.cat([pad(mask_a, (width - na, 0)), pad(mask_b, (width - nb, 0))])
    return new_cache(layers, filled=width), mask


def row_cache(cache: Any, row: int, valid: Any) -> list[tuple[Any, Any]]:
    """Row `row`'s cache at its unmasked positions, copied out of a batch cache: [kv_heads, n, head_dim]."""
    return [(layer.keys[row][:, valid].clone(), layer.values[row][:, valid].clone()) for layer in cache.layers]


# ---------------------------------------------------------------- attention over grouped keys/values
NATIVE_GQA = "orchestra_sdpa_gqa"


def _sdpa_native_gqa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' sdpa with a mask copies K and V once per query head (it passes grouped K/V to torch only on
    CUDA without a mask); torch's CPU kernel takes grouped K/V and a mask as they are. With the engine's padded
    batches there is always a mask, so on CPU that copy of the whole cache was most of a decode step."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (query.device.type != "cpu" or attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1
            or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_native_gqa(model: Any) -> bool:
    """Switch an sdpa model to `_sdpa_native_gqa` (same masks, same math); False, unchanged, for other kernels."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NATIVE_GQA, _sdpa_native_gqa)
    AttentionMaskInterface.register(NATIVE_GQA, sdpa_mask)
    model.set_attn_implementation(NATIVE_GQA)
    return True
