"""Per-episode KV reuse (orchestra/engine/kv_reuse.py) on the tiny policy: a later turn fed only its new tokens gets the
same tokens and logprobs as a from-scratch encode; the store's taking, release, memory cap and weight-swap
clearing; the in-place cache layer against HF's concatenating one."""

from __future__ import annotations

import asyncio

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.engine import Sampling, eos_token_ids
from orchestra.engine.hf import HFEngine
from orchestra.engine.kv_reuse import BLOCK, GrowingLayer, PrefixStore, use_native_gqa
from orchestra.policy.models import load_policy
from tests.helpers.fakes import FakeTool, make_task
from tools.base import LocalToolClient

SEEDED = [Sampling(max_tokens=10, temperature=1.0, seed=100 + i) for i in range(6)]


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny")


def engine(tiny, mb: float = 64.0, chunk: int = 4096) -> HFEngine:
    model, tok = tiny
    return HFEngine.from_model(model, tok, prefix_cache_mb=mb, prefill_chunk_tokens=chunk)


def first_prompts(tok, n: int = 4) -> list[list[int]]:
    out = []
    for i in range(n):  # different lengths, and no prefix shared by all (each row's own cache is what is reused)
        msgs = [{"role": "system", "content": f"Orchestrator {i}." + " Route carefully." * (i + 2)},
                {"role": "user", "content": f"What is {i} * {3 + i}?"}]
        out.append(tok.encode(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                              add_special_tokens=False))
    return out


def direct_logprobs(model, prompt, tokens):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    return [lp[len(prompt) - 1 + j, t].item() for j, t in enumerate(tokens)]


async def two_turns(eng: HFEngine, tok, extra: list[list[int]]) -> tuple[list, list, list[list[int]]]:
    """Turn 1 on first_prompts, then turn 2 on prompt + response + an observation (transcript mode's shape)."""
    prompts = first_prompts(tok)
    first = await asyncio.gather(*[eng.generate(p, SEEDED[i]) for i, p in enumerate(prompts)])
    second_prompts = [p + g.token_ids + extra[i] for i, (p, g) in enumerate(zip(prompts, first, strict=True))]
    second = await asyncio.gather(*[eng.generate(p, SEEDED[i + 2]) for i, p in enumerate(second_prompts)])
    return first, second, second_prompts


async def test_next_turn_reuses_its_cache_and_matches_from_scratch(tiny):
    model, tok = tiny
    extra = [tok.encode(f"<tool_response>result {i}" + " more" * i + "</tool_response>", add_special_tokens=False)
             for i in range(4)]
    reuse, scratch = engine(tiny), engine(tiny, mb=0)
    first_r, second_r, prompts2 = await two_turns(reuse, tok, extra)
    first_s, second_s, _ = await two_turns(scratch, tok, extra)
    assert scratch.stats()["prefix_hits"] == 0
    stats = reuse.stats()
    assert stats["prefix_hits"] == 4  # each second turn took its own first turn's cache
    assert stats["reused_prefix_tokens"] == sum(len(p) - len(e) - 1 for p, e in zip(prompts2, extra, strict=True))
    for a, b, p in zip(second_r + first_r, second_s + first_s, prompts2 + [None] * 4, strict=True):
        assert a.token_ids == b.token_ids  # same tokens as a from-scratch encode, same seeds
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        if p is not None:  # and the reused rows' logprobs are the model's own on the full sequence
            assert a.logprobs == pytest.approx(direct_logprobs(model, p, a.token_ids), abs=1e-4)
    assert len({tuple(g.token_ids) for g in second_r}) > 1


async def test_mixed_batch_of_reused_and_fresh_rows(tiny):
    """Rows with a kept cache and rows without, of different lengths, in one batch: each is exact."""
    model, tok = tiny
    eng = engine(tiny)
    prompts = first_prompts(tok)
    firsts = await asyncio.gather(*[eng.generate(p, SEEDED[i]) for i, p in enumerate(prompts[2:])])
    continued = [p + g.token_ids + [5, 6, 7] for p, g in zip(prompts[2:], firsts, strict=True)]
    batch = continued + prompts[:2]
    outs = await asyncio.gather(*[eng.generate(p, SEEDED[i]) for i, p in enumerate(batch)])
    assert eng.stats()["prefix_hits"] == 2
    # the fresh rows are fed whole; the continuing rows feed as many tokens, taking the rest from their caches
    assert max(map(len, continued)) - max(map(len, prompts[:2])) >= 20
    for p, g in zip(batch, outs, strict=True):
        assert g.logprobs == pytest.approx(direct_logprobs(model, p, g.token_ids), abs=1e-4)


async def test_chunked_prefill_matches_one_forward(tiny):
    """Prefill in 16-token chunks (the cache growing chunk by chunk) gives the tokens and logprobs of one forward
    over the whole prompt, for fresh left-padded rows and for rows continuing from a kept cache."""
    model, tok = tiny
    extra = [tok.encode(f"<tool_response>result {i}: " + " ".join(str(37 * j) for j in range(8 + 2 * i))
                        + "</tool_response>", add_special_tokens=False) for i in range(4)]
    forwards = []
    hook = model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        runs = {}
        for chunk in (0, 16):
            forwards.clear()
            runs[chunk] = await two_turns(engine(tiny, chunk=chunk), tok, extra), len(forwards)
    finally:
        hook.remove()
    (first_c, second_c, prompts2), n_chunked = runs[16]
    (first_w, second_w, _), n_whole = runs[0]
    # turn 1 feeds > 40 tokens a row and turn 2 > 16 new ones: both prefills take several chunk forwards
    assert min(map(len, first_prompts(tok))) > 40 and min(map(len, extra)) > 16
    assert n_chunked >= n_whole + 4
    for a, b in zip(first_c + second_c, first_w + second_w, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    for p, g in zip(prompts2, second_c, strict=True):
        assert g.logprobs == pytest.approx(direct_logprobs(model, p, g.token_ids), abs=1e-4)
    with pytest.raises(ValueError, match="prefill_chunk_tokens"):
        engine(tiny, chunk=-1)


async def test_agent_loop_releases_ended_episodes_and_weights_clear(tiny):
    model, tok = tiny
    eng = engine(tiny)
    tools = {n: FakeTool(n, reply=f"{n} result") for n in ("search", "answer")}
    loop = AgentLoop(eng, LocalToolClient(tools), Prompter(tok), context_mode="transcript", max_turns=3,
                     eos_token_ids=eos_token_ids(tok))
    trajs = await asyncio.gather(*[loop.run(make_task(i), Sampling(max_tokens=12, seed=i)) for i in range(3)])
    assert all(len(t.turns) == 3 for t in trajs)  # the untrained policy never answers: every turn runs
    assert eng.stats()["prefix_hits"] == 6  # turns 2 and 3 of each episode
    assert len(eng.prefix_store) == 0 and eng.prefix_store.bytes == 0  # released when each episode ended
    await eng.generate(first_prompts(tok)[0], SEEDED[0])
    assert len(eng.prefix_store) == 1
    eng.load_weights(model.state_dict(), version=1)
    assert len(eng.prefix_store) == 0  # a cache from old weights is never reused under new ones


def kv(n: int, fill: float = 1.0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((2, n, 4), fill), torch.full((2, n, 4), fill)) for _ in range(2)]


def test_store_takes_longest_prefix_once_and_respects_cap():
    per_token = 2 * 2 * 2 * 4 * 4  # layers * (k, v) * heads * dim * 4 bytes
    store = PrefixStore(max_bytes=per_token * 100)
    a, b = list(range(40)), list(range(20)) + [999] * 20
    store.put(a, kv(40, 1.0))
    store.put(b, kv(40, 2.0))
    assert len(store) == 2 and store.bytes == per_token * 80
    assert store.take(list(range(5))) is None  # shorter than a block
    assert store.take([7] * 50) is None  # nothing shares its first block
    cache, n = store.take(list(range(35)) + [1, 2])  # a's first 35 ids, then a divergence
    assert n == 35 and cache[0][0].shape == (2, 35, 4) and float(cache[0][0][0, 0, 0]) == 1.0
    assert len(store) == 1  # taken: the continuing row stores a longer one when it ends
    cache, n = store.take(list(b))  # an exact match still leaves the prompt one token to feed
    assert n == len(b) - 1 and float(cache[1][1][0, 0, 0]) == 2.0
    for i in range(4):  # 40 tokens each, cap 100 tokens: the oldest go first
        store.put([i] * BLOCK + list(range(24)), kv(40))
    assert len(store) == 2 and store.bytes <= store.max_bytes and store.evicted == 2
    assert store.take([0] * BLOCK + list(range(30))) is None and store.take([3] * BLOCK + [0, 1]) is not None
    store.put(list(range(300)), kv(300))  # bigger than the whole cap: not kept
    assert len(store) == 1


def test_store_release_drops_only_that_episode():
    store = PrefixStore(max_bytes=10**6)
    prompt = list(range(30))
    store.put(prompt + [50, 51], kv(32))  # this episode: prompt + response[:-1]
    store.put(prompt + [60, 61], kv(32))  # a sibling in its group, same prompt, another response
    assert store.release(prompt + [50, 51, 52]) == 1
    assert len(store) == 1 and store.take(prompt + [60, 61, 62])[1] == 32
    assert PrefixStore(0).enabled is False
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixStore(-1)


def test_growing_layer_matches_dynamic_layer():
    torch.manual_seed(0)
    grow, dyn = GrowingLayer(), DynamicLayer()
    rows = 3
    for step, n in enumerate([5, 1, 70, 1, 1, 130]):  # past the spare room twice
        k, v = torch.randn(rows, 2, n, 4), torch.randn(rows, 2, n, 4)
        kg, vg = grow.update(k, v)
        kd, vd = dyn.update(k, v)
        assert torch.equal(kg, kd) and torch.equal(vg, vd) and grow.get_seq_length() == dyn.get_seq_length()
        if step == 3:
            idx = torch.tensor([0, 2])
            grow.batch_select_indices(idx)
            dyn.batch_select_indices(idx)
            rows = 2
    assert torch.equal(grow.keys, dyn.keys)
    grow.crop(10)
    dyn.crop(10)
    assert torch.equal(grow.keys, dyn.keys) and grow.get_seq_length() == 10


def test_native_gqa_attention_matches_transformers_sdpa():
    """The engine's attention (grouped K/V straight to torch) gives the logits of transformers' own sdpa path on a
    left-padded batch, where transformers would copy K/V per head."""
    model, tok = load_policy("tiny")
    ids = torch.randint(5, 500, (3, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :7], mask[2, :19] = 0, 0
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        assert use_native_gqa(model) and model.config._attn_implementation != "sdpa"
        got = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert torch.allclose(got[mask > 0], ref[mask > 0], atol=1e-5)
    assert not use_native_gqa(load_policy("tiny", attn_implementation="eager")[0])  # other kernels stay as they are
