"""HFEngine on the tiny policy: real batched generation, coalescing, logprob fidelity, stops, weight swaps;
and the vLLM engine's clear error where vllm is absent."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
import torch

from orchestra.engine import Engine, Sampling, eos_token_ids
from orchestra.engine.hf import HFEngine
from orchestra.engine.sampling import filter_top_k_top_p, inverse_cdf
from orchestra.policy.models import load_policy

GREEDY = Sampling(max_tokens=12, temperature=0.0)
# The untrained tiny model's greedy output repeats one token; seeded sampling gives varied, reproducible tokens.
SEEDED = [Sampling(max_tokens=12, temperature=1.0, seed=i) for i in range(8)]


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny")  # default cache: the tokenizer is trained once per machine


@pytest.fixture(scope="module")
def prompts(tiny):
    _, tok = tiny
    out = []
    for i in range(6):  # different lengths, so batches need left padding
        msgs = [{"role": "system", "content": "You are an orchestrator." + " Be brief." * i},
                {"role": "user", "content": f"What is {i} + {7 * i}?"}]
        out.append(tok.encode(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                              add_special_tokens=False))
    assert len({len(p) for p in out}) == len(out)
    return out


def make(tiny, **kw):
    model, tok = tiny
    return HFEngine.from_model(model, tok, **kw)


def direct_logprobs(model, prompt, tokens, temperature):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    scaled = logits / temperature if temperature > 0 else logits
    lp = torch.log_softmax(scaled, dim=-1)
    return [lp[len(prompt) - 1 + j, t].item() for j, t in enumerate(tokens)]


async def test_generate_real_tokens(tiny, prompts):
    engine = make(tiny)
    assert isinstance(engine, Engine)
    gen = await engine.generate(prompts[0], Sampling(max_tokens=5, temperature=1.0))
    assert len(gen.token_ids) == len(gen.logprobs) == 5 and gen.finish_reason == "length"
    assert all(0 <= t < len(tiny[1]) for t in gen.token_ids) and all(lp <= 0 for lp in gen.logprobs)
    assert (await engine.generate(prompts[0], Sampling(max_tokens=0))).token_ids == []


async def test_batching_coalesces_and_matches_alone(tiny, prompts):
    engine = make(tiny)
    alone = [await engine.generate(p, SEEDED[i]) for i, p in enumerate(prompts)]
    assert engine.stats()["batches"] == len(prompts)
    batched = await asyncio.gather(*[engine.generate(p, SEEDED[i]) for i, p in enumerate(prompts)])
    stats = engine.stats()
    assert stats["batches"] == len(prompts) + 1  # the concurrent requests ran as one batch
    assert stats["mean_batch_size"] == pytest.approx(2 * len(prompts) / (len(prompts) + 1))
    assert stats["tokens_generated"] == 2 * sum(len(g.token_ids) for g in alone)
    assert len({tuple(g.token_ids) for g in alone}) == len(alone)
    for a, b in zip(alone, batched, strict=True):
        assert a.token_ids == b.token_ids  # left padding + position ids keep each row exact
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    greedy_alone = await engine.generate(prompts[-1], GREEDY)
    greedy_batched = await asyncio.gather(*[engine.generate(p, GREEDY) for p in prompts])
    assert greedy_batched[-1].token_ids == greedy_alone.token_ids
    assert greedy_batched[-1].logprobs == pytest.approx(greedy_alone.logprobs, abs=1e-4)


async def test_shared_prefix_batch_matches_alone(tiny):
    """Prompts sharing a long system prompt: the prefix is prefilled once, rows still match their solo runs."""
    _, tok = tiny
    system = {"role": "system", "content": "You are an orchestrator. Call exactly one tool per turn. " * 4}
    prompts = [tok.encode(tok.apply_chat_template([system, {"role": "user", "content": "What is 3 * 4?" * (i + 1)}],
                                                  tokenize=False, add_generation_prompt=True),
                          add_special_tokens=False) for i in range(4)]
    engine = make(tiny)
    alone = [await engine.generate(p, SEEDED[i]) for i, p in enumerate(prompts)]
    assert engine.stats()["shared_prefix_tokens"] == 0
    batched = await asyncio.gather(*[engine.generate(p, SEEDED[i]) for i, p in enumerate(prompts)])
    assert engine.stats()["shared_prefix_tokens"] >= 40
    for a, b in zip(alone, batched, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


async def test_max_batch_size_splits(tiny, prompts):
    for join_every in (0, 1):  # rows that all end at once leave no running batch to join
        engine = make(tiny, max_batch_size=4, join_every=join_every)
        await asyncio.gather(*[engine.generate(prompts[i % len(prompts)], Sampling(max_tokens=2, temperature=0))
                               for i in range(10)])
        assert engine.stats()["batches"] == 3 and engine.stats()["joins"] == 0


async def test_requests_join_a_running_batch_and_match_alone(tiny, prompts):
    """Requests queued while a batch decodes join it at step `join_every` (one join, two row widths merged) and
    give the tokens and logprobs they give alone; the batch's own row is unaffected."""
    loop = asyncio.get_running_loop()
    first = Sampling(max_tokens=20, temperature=1.0, seed=11)
    late = [(prompts[i], SEEDED[i]) for i in (5, 0, 3)]  # longer and shorter than the running row
    alone = [await make(tiny).generate(p, s) for p, s in [(prompts[2], first), *late]]
    engine = make(tiny, join_every=4)
    reqs = [engine._request(p, s, loop) for p, s in [(prompts[2], first), *late]]
    engine._pending.extend(reqs[1:])  # already queued when the batch of reqs[0] starts
    await asyncio.to_thread(engine._generate_batch, [reqs[0]])
    joined = [await r.future for r in reqs]
    assert engine.stats()["batches"] == 1 and engine.stats()["joins"] == 1
    for a, b in zip(alone, joined, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


async def test_logprobs_equal_direct_forward(tiny, prompts):
    model, _ = tiny
    engine = make(tiny)
    greedy, warm = await asyncio.gather(engine.generate(prompts[1], GREEDY),
                                        engine.generate(prompts[4], Sampling(max_tokens=12, temperature=0.7)))
    assert greedy.logprobs == pytest.approx(direct_logprobs(model, prompts[1], greedy.token_ids, 0.0), abs=1e-4)
    assert warm.logprobs == pytest.approx(direct_logprobs(model, prompts[4], warm.token_ids, 0.7), abs=1e-4)
    top1 = await engine.generate(prompts[1], Sampling(max_tokens=12, temperature=1.0, top_k=1))
    assert top1.token_ids == greedy.token_ids  # top_k=1 is argmax, whatever the temperature


async def test_per_row_stop_and_length(tiny, prompts):
    model, tok = tiny
    outs = await asyncio.gather(*[make(tiny).generate(p, SEEDED[i]) for i, p in enumerate(prompts)])
    # a (prompt, position) whose token has not appeared before it: making it the eos stops the row there
    k, j = next((k, j) for k, g in enumerate(outs) for j in range(2, 8) if g.token_ids[j] not in g.token_ids[:j])
    first, stop_id, other = outs[k].token_ids, outs[k].token_ids[j], (k + 1) % len(prompts)
    engine = HFEngine(model, eos_token_ids=[stop_id], pad_token_id=tok.pad_token_id)
    cut_sampling = Sampling(max_tokens=j, temperature=1.0, seed=k)
    stopped, short, cut = await asyncio.gather(
        engine.generate(prompts[k], SEEDED[k]), engine.generate(prompts[other], GREEDY),
        engine.generate(prompts[k], cut_sampling))
    assert stopped.token_ids == first[: j + 1] and stopped.finish_reason == "stop"  # eos id included
    assert cut.token_ids == first[:j] and cut.finish_reason == "length"
    assert short.finish_reason == "stop" or len(short.token_ids) == GREEDY.max_tokens
    assert engine.stats()["batches"] == 1
    via_sampling = await make(tiny).generate(prompts[k], Sampling(max_tokens=12, temperature=1.0, seed=k,
                                                                  stop_token_ids=[stop_id]))
    assert via_sampling.token_ids == first[: j + 1] and via_sampling.finish_reason == "stop"


async def test_seeded_sampling_reproducible_across_batches(tiny, prompts):
    engine = make(tiny)
    s = Sampling(max_tokens=16, temperature=1.0, top_p=0.9, top_k=50, seed=7)
    alone = await engine.generate(prompts[0], s)
    together = await asyncio.gather(*[engine.generate(p, s) for p in prompts])
    assert together[0].token_ids == alone.token_ids
    other_seed = await engine.generate(prompts[0], Sampling(max_tokens=16, temperature=1.0, seed=8))
    assert other_seed.token_ids != alone.token_ids


def test_filter_top_k_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0]])
    from orchestra.engine import Sampling as S

    out = filter_top_k_top_p(logits, [S(top_k=2), S(top_p=0.5)])
    assert torch.isfinite(out[0]).tolist() == [True, True, False, False]
    assert torch.isfinite(out[1]).tolist() == [True, False, False, False]  # p(top)=0.64 >= 0.5 already
    assert torch.equal(filter_top_k_top_p(logits, [S(), S()]), logits)


def test_inverse_cdf_sampling_follows_the_probabilities():
    probs = torch.tensor([0.5, 0.0, 0.3, 0.2, 0.0]).expand(20000, 5)
    gen = torch.Generator().manual_seed(0)
    draws = inverse_cdf(probs, torch.rand(20000, 1, dtype=torch.float64, generator=gen))
    freq = torch.bincount(draws, minlength=5) / 20000
    assert freq[1] == 0 and freq[4] == 0  # zero-probability tokens are never drawn
    assert torch.allclose(freq, probs[0], atol=0.015)  # ~4 standard errors at n = 20000
    edge = inverse_cdf(probs[:3], torch.tensor([[0.0], [0.5], [1.0]], dtype=torch.float64))
    assert edge.tolist() == [0, 2, 3]  # u = 1 (u * total rounding up) still lands on the last possible token


async def test_event_loop_stays_free_during_generation(tiny, prompts):
    engine = make(tiny)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    await engine.generate(prompts[0], Sampling(max_tokens=24, temperature=0))
    task.cancel()
    assert ticks > 3  # the batch ran in a worker thread, not on the loop


async def test_load_weights_swaps_and_versions(tiny, prompts):
    model, tok = tiny
    model2, _ = load_policy("tiny", seed=5)
    engine = HFEngine.from_model(model2, tok)
    before = await engine.generate(prompts[0], GREEDY)
    engine.load_weights(model.state_dict(), version=3)
    after = await engine.generate(prompts[0], GREEDY)
    assert engine.version == 3 and engine.stats()["version"] == 3
    assert after.token_ids == (await make(tiny).generate(prompts[0], GREEDY)).token_ids
    assert after.token_ids != before.token_ids
    with pytest.raises(ValueError, match="does not match"):
        engine.load_weights({"not.a.weight": torch.zeros(1)}, version=4)
    assert engine.version == 3


def test_engine_runs_where_the_model_is(tiny):
    """No device given: the engine keeps the model's own (a GPU-loaded policy used to be moved back to CPU).
    A meta-device copy stands in for a GPU here: construction must not move it."""
    import copy

    model, tok = tiny
    elsewhere = HFEngine.from_model(copy.deepcopy(model).to("meta"), tok)
    assert elsewhere.device == "meta" and next(elsewhere.model.parameters()).device.type == "meta"
    assert make(tiny).device == "cpu"
    moved = HFEngine.from_model(copy.deepcopy(model), tok, device="meta")  # an explicit device still moves it
    assert next(moved.model.parameters()).device.type == "meta"


async def test_bad_requests_raise_clear_errors(tiny):
    engine = make(tiny)
    with pytest.raises(ValueError, match="empty"):
        await engine.generate([], GREEDY)
    with pytest.raises(ValueError, match="vocabulary"):
        await engine.generate([1, 10**6], GREEDY)
    with pytest.raises(ValueError, match="top_p"):
        await engine.generate([1, 2], Sampling(top_p=0.0))
    assert eos_token_ids(tiny[1]) == sorted(engine.eos)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed; error path not reachable")
def test_vllm_engine_clear_error_without_vllm():
    from orchestra.engine.vllm import VLLMEngine  # importing the module never needs vllm

    with pytest.raises(ImportError, match=r"pip install -e \.\[gpu\]"):
        VLLMEngine("Qwen/Qwen3-8B")
