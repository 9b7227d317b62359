"""The HF transformers engine: batched generation with a causal LM on CPU or one GPU (`engine.kind=hf`).

Its KV caches live in orchestra/engine/kv_reuse.py, its per-row token draws in orchestra/engine/sampling.py; the
contract it keeps (Engine, Sampling, Generation) is orchestra/engine/__init__.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestra.engine import Generation, Sampling


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: Sampling
    future: Any  # asyncio.Future[Generation], owned by `loop`
    loop: Any
    stop: frozenset[int]
    generator: Any = None  # torch.Generator when the request carries a seed
    queued_at: float = 0.0  # time.perf_counter() when generate() queued it


class HFEngine:
    """Batched generation with an HF transformers causal LM (CPU or one GPU).

    Concurrent `generate` calls are queued; a runner task waits `batch_wait_ms` for company, takes up to
    `max_batch_size` requests and runs them as one left-padded batch with a KV cache in a worker thread, so the
    event loop keeps serving tool calls meanwhile. Rows stop independently (eos / stop ids -> "stop", their
    own max_tokens -> "length"); finished rows leave the batch (their KV rows are dropped) and their futures
    resolve at once. Prompt tokens already computed are not computed again: a finished row's cache is kept
    (orchestra/engine/kv_reuse.py, up to `prefix_cache_mb`) and the episode's next turn feeds only its new tokens;
    rows without one share a single prefill of the batch's common prefix (system prompt + tools). Requests
    that arrive while a batch runs join it every `join_every` decode steps, into the rows finished ones left
    (continuous batching at turn granularity; 0: they wait and form the next batch). One event loop at a time
    drives an engine. `release(ids)` drops an ended episode's cache early.
    logprobs are log_softmax(logits / temperature) at the sampled token (raw logits when temperature == 0),
    before top-k / top-p filtering: the quantity the learner recomputes, so PPO ratios start at ~1.
    """

    def __init__(self, model: Any, eos_token_ids: list[int], pad_token_id: int | None, max_batch_size: int = 64,
                 batch_wait_ms: float = 2.0, device: str | None = None, prefix_cache_mb: float = 1024.0,
                 join_every: int = 8, prefill_chunk_tokens: int = 4096, sampler: Any = None):
        import threading

        from orchestra.engine.kv_reuse import PrefixStore, use_native_gqa

        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if join_every < 0:
            raise ValueError(f"join_every must be >= 0 (0: static batching), got {join_every}")
        if prefill_chunk_tokens < 0:
            raise ValueError(f"prefill_chunk_tokens must be >= 0 (0: one forward per prefill), got {prefill_chunk_tokens}")
        self.join_every, self.prefill_chunk_tokens = join_every, prefill_chunk_tokens
        # (logits, rows) -> (tokens, logprobs); replay swaps in one that follows a recorded episode
        # (orchestra/engine/ties.py `Follower`)
        self.sampler = sampler
        # None: where the model already is. A fixed "cpu" default moved every GPU-loaded policy back to the CPU
        # (the rollout workers and evaluation pass none).
        self.device = device or str(next(model.parameters()).device)
        self.model = model.to(self.device).eval()
        use_native_gqa(self.model)
        self.eos = frozenset(int(t) for t in eos_token_ids)
        self.pad_token_id = int(pad_token_id if pad_token_id is not None else (min(self.eos) if self.eos else 0))
        self.max_batch_size, self.batch_wait_ms = max_batch_size, batch_wait_ms
        self.min_shared_prefix = 16  # shorter common prefixes are not worth a separate forward
        self.version = 0
        self._lock = threading.Lock()  # held for a whole batch; load_weights waits for it
        self._queue_lock = threading.Lock()  # guards _pending: a running batch takes joiners from it
        self._pending: list[_Request] = []
        self._runner: Any = None
        self._runner_loop: Any = None
        # models whose caches are not plain full-attention keys/values (sliding windows) do not reuse
        reusable = not getattr(model.config.get_text_config(), "sliding_window", None)
        self.prefix_store = PrefixStore(int(prefix_cache_mb * 2**20) if reusable else 0)
        self._stats = {"batches": 0, "rows": 0, "requests": 0, "tokens_generated": 0, "prompt_tokens": 0,
                       "shared_prefix_tokens": 0, "reused_prefix_tokens": 0, "prefix_hits": 0, "busy_s": 0.0,
                       "queue_wait_s": 0.0, "joins": 0}

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, **kw: Any) -> HFEngine:
        from orchestra.engine import eos_token_ids

        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return cls(model, eos_token_ids(tokenizer), pad, **kw)

    # ------------------------------------------------------------ public
    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        import asyncio

        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("prompt_ids is empty")
        vocab = self.model.config.get_text_config().vocab_size
        if min(prompt) < 0 or max(prompt) >= vocab:
            raise ValueError(f"prompt_ids hold ids outside the model's vocabulary [0, {vocab})")
        if sampling.temperature < 0 or not 0 < sampling.top_p <= 1 or sampling.top_k < 0:
            raise ValueError(f"bad sampling {sampling}: need temperature >= 0, 0 < top_p <= 1, top_k >= 0")
        if sampling.max_tokens <= 0:
            return Generation(token_ids=[], logprobs=[], finish_reason="length")
        loop = asyncio.get_running_loop()
        req = self._request(prompt, sampling, loop)
        with self._queue_lock:
            self._pending.append(req)
        self._stats["requests"] += 1
        if self._runner is None or self._runner.done() or self._runner_loop is not loop:
            self._runner, self._runner_loop = loop.create_task(self._run()), loop
        return await req.future

    def _request(self, prompt: list[int], sampling: Sampling, loop: Any) -> _Request:
        import time

        import torch

        gen = None
        if sampling.seed is not None:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(int(sampling.seed))
        return _Request(prompt, sampling, loop.create_future(), loop, self.eos | frozenset(sampling.stop_token_ids),
                        gen, time.perf_counter())

    def load_weights(self, state_dict: dict[str, Any], version: int, partial: bool = False) -> None:
        """Swap in new weights between batches (blocks while a batch runs) and record their version.
        `partial`: `state_dict` holds only some weights (merged LoRA targets); the rest stay."""
        with self._lock:
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
            if partial:
                missing = []
            if unexpected or set(missing) - tied:
                raise ValueError(f"state_dict does not match the model: missing {sorted(set(missing) - tied)[:5]}, "
                                 f"unexpected {sorted(unexpected)[:5]}")
            self.prefix_store.clear()  # caches computed under the old weights are not the new policy's
            self.version = int(version)

    def release(self, ids: list[int]) -> None:
        """An episode ended after generating ids[len(prompt):] from a prompt: drop its kept KV cache now rather
        than when the memory cap pushes it out."""
        self.prefix_store.release([int(t) for t in ids])

    def stats(self) -> dict[str, float]:
        s = dict(self._stats)
        prefills = s["batches"] + s["joins"]  # a join prefills its rows, then they decode with the running batch
        s["mean_batch_size"] = s["rows"] / prefills if prefills else 0.0
        s["tokens_per_s"] = s["tokens_generated"] / s["busy_s"] if s["busy_s"] else 0.0
        s["prefix_cache_entries"], s["prefix_cache_mb"] = len(self.prefix_store), self.prefix_store.bytes / 2**20
        s["prefix_cache_evicted"] = self.prefix_store.evicted
        s["version"] = self.version
        return s

    # ------------------------------------------------------------ batching
    async def _run(self) -> None:
        import asyncio

        while self._pending:
            if len(self._pending) < self.max_batch_size and self.batch_wait_ms > 0:
                await asyncio.sleep(self.batch_wait_ms / 1000)  # let concurrent callers join this batch
            batch = self._take(self.max_batch_size)
            if not batch:
                continue
            try:
                await asyncio.to_thread(self._generate_batch, batch)
            except Exception as e:  # fail this batch's requests, keep serving later ones
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(e)

    @staticmethod
    def _deliver(req: _Request, gen: Generation) -> None:
        def resolve() -> None:
            if not req.future.done():
                req.future.set_result(gen)

        req.loop.call_soon_threadsafe(resolve)

    def _prefixes(self, batch: list[_Request]) -> list[tuple[Any, int]]:
        """Each row's already-computed prefix as (per-layer KV or None, length): its episode's kept cache when the
        store holds one, else the prompts' common prefix (system prompt + tools, typically) run once for all
        the rows without one — prefill dominates CPU batches of long prompts."""
        import os

        import torch

        from orchestra.engine.kv_reuse import row_cache

        store = self.prefix_store
        out: list[tuple[Any, int]] = [store.take(r.prompt_ids) if store.enabled else None for r in batch]
        self._stats["prefix_hits"] += sum(t is not None for t in out)
        self._stats["reused_prefix_tokens"] += sum(t[1] for t in out if t is not None)
        misses = [i for i, t in enumerate(out) if t is None]
        shared = 0
        if len(misses) >= 2:
            own = [batch[i].prompt_ids for i in misses]
            shared = min(len(os.path.commonprefix(own)), min(map(len, own)) - 1)  # each row keeps >= 1 own token
        if shared < self.min_shared_prefix:
            return [t if t is not None else (None, 0) for t in out]
        self._stats["shared_prefix_tokens"] += shared
        res = self.model(input_ids=torch.tensor([batch[misses[0]].prompt_ids[:shared]], device=self.device),
                         use_cache=True, logits_to_keep=1)
        kv = row_cache(res.past_key_values, 0, slice(None))
        return [t if t is not None else (kv, shared) for t in out]

    def _take(self, n: int) -> list[_Request]:
        """Up to n queued requests, oldest first (cancelled ones dropped); the event loop and a running batch's
        worker thread both take from the queue."""
        with self._queue_lock:
            taken = [r for r in self._pending[:n] if not r.future.done()]
            del self._pending[:n]
        return taken

    def _prefill(self, batch: list[_Request]) -> tuple[Any, Any, Any, Any]:
        """One forward over the rows' prompts, kept prefixes reused: (cache, mask, last logits, next positions)."""
        import time

        import torch

        from orchestra.engine.kv_reuse import merge_left_padded, new_cache

        stats, now = self._stats, time.perf_counter()  # counted before any row is delivered: no stale stats
        stats["rows"] += len(batch)
        stats["prompt_tokens"] += sum(len(r.prompt_ids) for r in batch)
        stats["queue_wait_s"] += sum(now - r.queued_at for r in batch)  # what joining a running batch cuts
        prefixes = self._prefixes(batch)
        # Feed every row the same number of tokens, `width`: a row whose uncomputed part is shorter re-feeds
        # the end of its cached prefix instead of padding, so no row has a masked gap between prefix and
        # prompt and the cache is no wider than the longest prompt (padding positions cost as much as tokens).
        width = max(len(r.prompt_ids) - n for r, (_, n) in zip(batch, prefixes, strict=True))
        prefixes = [(kv, max(0, len(r.prompt_ids) - width)) for r, (kv, _) in zip(batch, prefixes, strict=True)]
        cache, mask, done = new_cache(), torch.zeros((len(batch), 0), dtype=torch.long, device=self.device), 0
        if any(n for _, n in prefixes):
            cache, mask, done = merge_left_padded(prefixes)
        sfx = [len(r.prompt_ids) - n for r, (_, n) in zip(batch, prefixes, strict=True)]
        ids = torch.full((len(batch), width), self.pad_token_id, dtype=torch.long)
        own = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (r, (_, n)) in enumerate(zip(batch, prefixes, strict=True)):
            # [left padding | cached prefix] [left padding | the prompt's remaining tokens]
            ids[i, width - sfx[i]:] = torch.tensor(r.prompt_ids[n:])
            own[i, width - sfx[i]:] = 1
        ids, mask = ids.to(self.device), torch.cat([mask, own.to(self.device)], dim=1)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)[:, done:]  # count each row's tokens, padding excluded
        # Chunked prefill: about `prefill_chunk_tokens` tokens per forward, the cache growing chunk by chunk.
        # On CPU one forward over 64 x 400 tokens took 1.45 s and 4096-token chunks 0.9 s (RESULT
        # prefill_chunked_speedup, bench/engine_efficiency.py). Our reading, not profiled further: with an explicit
        # mask attention computes the whole L x L square, most of whose masked half chunks skip, and chunk-sized
        # activations stay in cache. It also bounds prefill memory whatever the batch.
        step = width if not self.prefill_chunk_tokens else max(16, self.prefill_chunk_tokens // len(batch))
        for start in range(0, width, step):
            end = min(width, start + step)
            out = self.model(input_ids=ids[:, start:end], attention_mask=mask[:, :done + end],
                             position_ids=pos[:, start:end], past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
        return cache, mask, out.logits[:, -1, :].float(), pos[:, -1] + 1

    def _generate_batch(self, batch: list[_Request]) -> None:
        import time

        import torch

        from orchestra.engine.kv_reuse import join_batches, row_cache
        from orchestra.engine.sampling import sample_rows

        sample = self.sampler or sample_rows
        with self._lock, torch.inference_mode():
            start = time.perf_counter()
            self._stats["batches"] += 1
            cache, mask, logits, next_pos = self._prefill(batch)
            rows = list(batch)  # requests still generating, aligned with the tensor rows
            toks: dict[int, list[int]] = {id(r): [] for r in batch}
            lps: dict[int, list[float]] = {id(r): [] for r in batch}
            step = 0
            while True:
                new, new_lp = sample(logits, rows)
                keep: list[int] = []
                for i, (r, t, lp) in enumerate(zip(rows, new.tolist(), new_lp.tolist(), strict=True)):
                    toks[id(r)].append(t)
                    lps[id(r)].append(lp)
                    self._stats["tokens_generated"] += 1
                    if t in r.stop or len(toks[id(r)]) >= r.sampling.max_tokens:
                        reason = "stop" if t in r.stop else "length"
                        if self.prefix_store.enabled:  # its cache holds the prompt + all but the token just drawn
                            self.prefix_store.put(r.prompt_ids + toks[id(r)][:-1], row_cache(cache, i, mask[i] > 0))
                        self._deliver(r, Generation(token_ids=toks[id(r)], logprobs=lps[id(r)], finish_reason=reason))
                    else:
                        keep.append(i)
                step += 1
                if not keep:  # a batch that ran dry ends: the runner gathers the next one (batch_wait_ms)
                    break
                if len(keep) < len(rows):  # drop finished rows from the batch and the KV cache
                    idx = torch.tensor(keep, device=self.device)
                    cache.batch_select_indices(idx)
                    mask, next_pos, new = mask[idx], next_pos[idx], new[idx]
                    rows = [rows[i] for i in keep]
                mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=1)
                out = self.model(input_ids=new[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                                 past_key_values=cache, use_cache=True)
                cache, logits, next_pos = out.past_key_values, out.logits[:, -1, :].float(), next_pos + 1
                # Continuous batching: every `join_every` steps queued requests take the free rows. A join copies
                # the running cache once, so joining at every step would cost more than the wait it saves.
                joining: list[_Request] = []
                if self.join_every and len(rows) < self.max_batch_size and step % self.join_every == 0:
                    joining = self._take(self.max_batch_size - len(rows))
                if joining:
                    batch.extend(joining)  # the caller fails every request of `batch` if this batch raises
                    self._stats["joins"] += 1
                    toks.update({id(r): [] for r in joining})
                    lps.update({id(r): [] for r in joining})
                    c2, m2, l2, p2 = self._prefill(joining)
                    cache, mask = join_batches(cache, mask, c2, m2)
                    logits, next_pos, rows = torch.cat([logits, l2]), torch.cat([next_pos, p2]), rows + joining
            self._stats["busy_s"] += time.perf_counter() - start
