"""orchestra.policy.memory: micro-batches by token budget, activation checkpointing and chunked logits give the
values (logprobs, entropy, gradients) of the plain computation, with and without LoRA and the shared prefix, and
measurably less memory: the peak of torch's CPU allocations over a forward + backward, from the profiler's
allocation events. CPU, tiny random Qwen3s, no downloads."""

from __future__ import annotations

import random

import pytest
import torch

from orchestra.policy.grpo import collate, token_logprobs
from orchestra.policy.memory import checkpointing, micro_batches
from orchestra.types import TrainSample


def qwen3(vocab: int = 300, layers: int = 2, hidden: int = 64, lora: bool = False, lora_dropout: float = 0.0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
                      pad_token_id=0, attn_implementation="sdpa")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(cfg).eval()
        if lora:
            from orchestra.policy.lora import attach

            model = attach(model, r=4, alpha=8.0, dropout=lora_dropout).eval()  # as the Learner keeps it
            for name, p in model.named_parameters():  # B = 0 at init: give the adapters weight to carry grads
                if "lora_B" in name:
                    torch.nn.init.normal_(p, std=0.1)
    return model


def shared_prefix_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    rng = random.Random(seed)
    system = [rng.randrange(3, 200) for _ in range(40)]  # the shared system turn + catalogue
    samples = []
    for _ in range(5):
        r = [rng.randrange(3, 200) for _ in range(rng.randint(1, 9))]
        samples.append(TrainSample(system + [rng.randrange(3, 200) for _ in range(rng.randint(1, 9))], r,
                                   [1] * len(r), [-0.5] * len(r), rng.choice([-1.0, 0.5, 2.0])))
    return collate(samples, pad_id=0)


def test_micro_batches_slice_by_rows_and_by_a_token_budget():
    lengths = [5, 3, 9, 3, 7, 20]
    order = sorted(range(6), key=lambda i: lengths[i])  # 1, 3, 0, 4, 2, 5
    assert micro_batches(lengths, 4) == [order[:4], order[4:]]
    # at most 16 padded tokens: [3, 3, 5] costs 15; + 7 would cost 28; [7, 9] 18 > 16; a 20-token row goes alone
    assert micro_batches(lengths, 4, 16) == [[1, 3, 0], [4], [2], [5]]
    assert micro_batches(lengths, 2, 1000) == [[1, 3], [0, 4], [2, 5]]
    assert micro_batches([], 4, 16) == []
    with pytest.raises(ValueError, match="max_tokens"):
        micro_batches(lengths, 4, -1)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_checkpointing_and_chunks_give_the_plain_values_and_gradients(lora):
    model = qwen3(lora=lora)
    batch = shared_prefix_batch()
    results = {}
    for shared in (0, 16):
        for ckpt in (False, True):
            for chunk in (0, 4):  # 4 < the batch's response tokens: several chunks, each checkpointed
                model.zero_grad(set_to_none=True)
                lp, ent = token_logprobs(model, batch, 0.7, return_entropy=True, min_shared_prefix=shared,
                                         logit_chunk_tokens=chunk, gradient_checkpointing=ckpt)
                (lp * batch["advantages"]).sum().backward()
                grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
                results[shared, ckpt, chunk] = lp.detach(), ent, grads
    lp0, ent0, g0 = results[0, False, 0]
    assert g0 and (lp0 != 0).any()
    for key, (lp, ent, grads) in results.items():
        torch.testing.assert_close(lp, lp0, atol=2e-6, rtol=1e-5, msg=f"logprobs {key}")
        torch.testing.assert_close(ent, ent0, atol=2e-6, rtol=1e-5, msg=f"entropy {key}")
        assert grads.keys() == g0.keys(), key
        for name in g0:
            torch.testing.assert_close(grads[name], g0[name], atol=2e-5, rtol=1e-4, msg=f"{name} {key}")
        assert (lp[~valid(batch)] == 0).all() and (ent[~valid(batch)] == 0).all()


def valid(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    steps = torch.arange(batch["responses"].shape[-1])
    return steps.unsqueeze(0) < batch["response_lengths"].unsqueeze(-1)


def test_checkpointing_recomputes_layers_in_the_backward_and_leaves_the_model_as_it_was():
    model = qwen3()
    layers = [m for m in model.modules() if type(m).__name__ == "Qwen3DecoderLayer"]
    calls = {"n": 0}

    def count(*_):
        calls["n"] += 1

    hooks = [layer.self_attn.register_forward_pre_hook(count) for layer in layers]  # the recompute calls forward
    batch = shared_prefix_batch()
    lp = token_logprobs(model, batch, 1.0, gradient_checkpointing=True)
    forward = calls["n"]
    lp.sum().backward()
    assert forward == len(layers) and calls["n"] == 2 * len(layers)  # each layer ran again in the backward
    with torch.no_grad():  # no gradients, nothing to recompute: checkpointing stays out of the way
        token_logprobs(model, batch, 1.0, gradient_checkpointing=True)
    assert calls["n"] == 3 * len(layers)
    for h in hooks:
        h.remove()
    assert all("forward" not in layer.__dict__ for layer in layers)  # unwrapped on exit
    with pytest.raises(ValueError, match="no transformers decoder layers"), checkpointing(torch.nn.Linear(2, 2)):
        pass


def test_lora_dropout_stays_off_under_checkpointing():
    """Eval semantics: a LoRA dropout of 0.5 would change every forward if it were active."""
    model = qwen3(lora=True, lora_dropout=0.5)
    batch = shared_prefix_batch()
    with torch.no_grad():
        want = token_logprobs(model, batch, 1.0)
    got = token_logprobs(model, batch, 1.0, gradient_checkpointing=True, logit_chunk_tokens=4)
    got.sum().backward()  # the recompute also runs without dropout, or non-reentrant checkpoint would object
    torch.testing.assert_close(got.detach(), want, atol=2e-6, rtol=1e-5)


def peak_bytes(fn) -> int:
    """Peak of torch's CPU tensor allocations while `fn` runs, above what was allocated before (the profiler's
    allocation and free events, in order). Deterministic: the same ops allocate the same sizes."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    now = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        now += e.nbytes()
        peak = max(peak, now)
    return peak


def test_checkpointing_and_chunks_cut_the_peak_memory_of_a_training_step(capsys):
    # 4 layers, vocab 4096: 2 rows x 1,024 tokens, 512 of them response tokens; (B, R, V) fp32 logits are 8 MiB
    model = qwen3(vocab=4096, layers=4)
    g = torch.Generator().manual_seed(0)
    samples = [TrainSample(torch.randint(1, 4096, (768,), generator=g).tolist(),
                           torch.randint(1, 4096, (256,), generator=g).tolist(), [1] * 256, [0.0] * 256, 1.0)
               for _ in range(2)]
    batch = collate(samples, pad_id=0)
    logits_bytes = 2 * 256 * 4096 * 4

    def step(**kw):
        model.zero_grad(set_to_none=True)  # before measuring: frees made inside would read as negative
        return peak_bytes(lambda: token_logprobs(model, batch, 1.0, **kw).sum().backward())

    plain = step()
    ckpt = step(gradient_checkpointing=True)
    chunked = step(logit_chunk_tokens=128)
    both = step(gradient_checkpointing=True, logit_chunk_tokens=128)
    with capsys.disabled():
        print(f"\npeak MiB over forward + backward: plain {plain / 2**20:.1f}, checkpointing {ckpt / 2**20:.1f}, "
              f"logits in chunks of 128 {chunked / 2**20:.1f}, both {both / 2**20:.1f}")
    assert ckpt < 0.6 * plain  # the layers' activations are most of it
    assert plain - chunked > 2 * logits_bytes  # logits, their softmax and gradient live one chunk at a time
    assert both < 0.3 * plain


def test_the_prefix_view_is_freed_without_the_cyclic_gc():
    """A reference cycle (view -> its update -> view) kept every layer's repeated prefix alive until the cyclic GC
    ran, raising a step's peak; the view must go as soon as its last reference does."""
    import gc
    import weakref

    from orchestra.policy.memory import prefix_view

    model = qwen3()
    head = model.model(input_ids=torch.arange(1, 20)[None], use_cache=True)
    view = prefix_view(head.past_key_values, rows=3)
    keys = weakref.ref(view.layers[0].keys)
    assert keys().shape[0] == 3
    gc.disable()
    try:
        del view
        assert keys() is None
    finally:
        gc.enable()
