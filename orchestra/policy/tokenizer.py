"""Tokenizers: the tiny policy's byte-level BPE, the ChatML+tools template, and the ids that end a turn.

- The tiny tokenizer is trained at first use on the project's own text (`corpus_text` below) and cached under
  `cache_dir/tiny-tokenizer-<hash of text + vocab size>/`. The text is built from core and the conf/ files
  only, never from tools that may or may not build in a process, so it is the same everywhere. Editing it (a
  zoo YAML, the system prompt) changes the hash and so trains a new tokenizer: a checkpoint keeps working
  because it stores its own.
- The embedded policies use our ChatML+tools template (orchestra/policy/templates/chatml_tools.jinja);
  `finish_tokenizer` sets it (or a `chat_template` override: a jinja file path or the template text) and a pad
  token on any tokenizer.
Cache directories are written atomically (`atomic_build`: tmp dir, then rename) so concurrent first uses from
several processes are safe. Which tokenizer a policy name loads is orchestra/policy/models.py's business.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.config import CONF_DIR, TinyModelConfig
from orchestra.engine import single_token_id

TEMPLATE_PATH = Path(__file__).resolve().parent / "templates" / "chatml_tools.jinja"
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]  # skipped by skip_special_tokens
# Single ids that decode verbatim (never skipped): the parser needs to see them in decoded text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def chatml_template() -> str:
    return TEMPLATE_PATH.read_text()


def resolve_template(chat_template: str) -> str:
    """A path to a jinja file, or the template text itself (anything containing a jinja tag)."""
    if "{%" in chat_template or "{{" in chat_template:
        return chat_template
    path = Path(chat_template).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"chat_template {chat_template!r} is neither a file nor jinja template text")
    return path.read_text()


def atomic_build(final: Path, build: Callable[[Path], None]) -> Path:
    """Run `build(tmp_dir)` and rename the result to `final`; if another process won the race, keep theirs."""
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# ---------------------------------------------------------------- the tiny tokenizer's training text
_WORDS = ("the a an of to in is what which who how many much find compute number city river country year name "
          "value result answer problem tool model expert cost price latency search retrieve document passage code "
          "python function returns list sum product difference largest smallest first last capital population "
          "written by born discovered largest total average prime even odd square root divide multiply add "
          "subtract and or not if then because therefore given each per dollar second token call calls").split()
_SUBJECTS = ("Paris France Berlin Germany Tokyo Japan Nile Amazon Einstein Curie Newton Shakespeare Python Rust "
             "Mars Jupiter Everest Pacific Atlantic Rome Egypt China India Brazil Canada").split()


def _tool_schemas(tiers: list[str], prices: dict[str, tuple[float, float, float]]) -> list[dict[str, Any]]:
    """The default catalogue's shape as prompts render it (tools/orchestra_tools.py, tools/calculator.py), built
    here from the zoo files alone, so BPE learns its merges and the training text never depends on whether the
    tools can be built in this process. Prices the zoo files leave to genai-prices are placeholders."""
    def tiered(name: str, summary: str, prefix: str) -> dict[str, Any]:
        own = [t for t in tiers if t.startswith(prefix)] or tiers
        lines = "; ".join(f"{t} ${prices[t][0]:g}/${prices[t][1]:g} ~{prices[t][2]:g}s" if t in prices
                          else f"{t}: unavailable" for t in own)
        props = {"model": {"type": "string", "enum": own, "description": "tier id of the expert model"}}
        return {"type": "function", "function": {"name": name, "description": f"{summary} Tiers ($/M tokens "
                f"in/out, latency): {lines}.", "parameters": {"type": "object", "properties": props,
                                                             "required": ["model"], "additionalProperties": False}}}

    return [tiered("search", "Search: an expert writes a query; retrieved passages come back.", "search"),
            tiered("enhance_reasoning", "Code: an expert writes Python; the sandbox runs it.", "reasoner"),
            tiered("answer", "Answer: an expert gives the final answer (ends the episode).", "answer"),
            {"type": "function", "function": {"name": "calculator", "description": "Evaluate one arithmetic "
             "expression exactly, e.g. '(3/7 + 2^10) * sqrt(2)'. Returns the exact value and a decimal "
             "approximation.", "parameters": {"type": "object", "properties": {"expression": {
                 "type": "string", "description": "the expression to evaluate"}}, "required": ["expression"],
                 "additionalProperties": False}}}]


def corpus_text() -> str:
    """The tiny tokenizer's training text: the project's own prompts, zoo files, template, tool calls, digits and
    generated problem text. Deterministic, so the cache key (its hash) is stable across machines."""
    import random

    import jinja2
    import yaml

    from orchestra.agent.prompt import DEFAULT_SYSTEM, preference_text

    rng = random.Random(0)
    parts: list[str] = [chatml_template(), DEFAULT_SYSTEM]
    tiers: list[str] = []
    prices: dict[str, tuple[float, float, float]] = {}
    for path in sorted((CONF_DIR / "zoo").glob("*.yaml")):
        raw = path.read_text()
        parts.append(raw)
        zoo = yaml.safe_load(raw) or {}
        experts = zoo.get("experts") or {}
        for tier, expert in (zoo.get("tiers") or {}).items():
            tiers.append(tier)
            e = experts.get(expert) or {}
            prices[tier] = (float(e.get("price_in_per_mtok") or 1.0), float(e.get("price_out_per_mtok") or 4.0),
                            float(e.get("latency_s", 2.0)))
    tiers = sorted(set(tiers)) or ["answer-1"]
    for tier in tiers:
        name = tier.rsplit("-", 1)[0].replace("reasoner", "enhance_reasoning").replace("answer-math", "answer")
        adaptive = ["consult", "submit"] if name == "answer" else []  # orchestra/agent/consults.py
        for tool in dict.fromkeys([name, "answer", *adaptive]):  # ordered: a set's order varies per process
            parts.append(f'<tool_call>{{"name": "{tool}", "arguments": {{"model": "{tier}"}}}}</tool_call>')
    answer_tiers = [t for t in tiers if t.startswith("answer")] or tiers
    for _ in range(10):  # the level words stay one token each (route hints: fixed-length lines; preference words)
        for word in ("high", "medium", "low", "minimal"):
            parts.append(f"Router (odds {word}): answer {rng.choice(answer_tiers)}.")
        for word in ("none", "minimal", "low", "medium", "high", "top"):
            parts.append(f"Priorities: cost {word}, latency {word}.")
    for _ in range(40):  # the prompt's section of consulted answers (letters, numbers)
        seen = rng.sample(answer_tiers, min(2, len(answer_tiers)))
        heading = rng.choice(["Expert answers (they agree):", "Expert answers (they differ):", "Expert answers:"])
        parts.append(heading + "\n" + "\n".join(f"{t}: {rng.choice(['A', 'B', 'C', 'D', str(rng.randint(0, 99))])}"
                                                  for t in seen))
    for _ in range(300):
        a, b = rng.randint(0, 9999), rng.randint(0, 999)
        op = rng.choice("+-*/")
        parts.append(f"What is {a} {op} {b}? {a}{op}{b} = {eval(f'{a}{op}{b}'):g}")  # noqa: S307 - digits only
    parts.append(" ".join(str(i) for i in range(1000)))
    problems = []
    for _ in range(400):
        words = rng.sample(_WORDS, 9) + rng.sample(_SUBJECTS, 2)
        rng.shuffle(words)
        problems.append(" ".join(words).capitalize() + rng.choice("?.!"))
    parts += problems
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    template = env.from_string(chatml_template())
    schemas = _tool_schemas(tiers, prices)
    for i, problem in enumerate(problems[:60]):
        pref = {"accuracy": 1.0, "cost": round(rng.uniform(-1, 1), 2), "latency": round(rng.uniform(-1, 1), 2),
                f"tool:{rng.choice(tiers)}": round(rng.uniform(-1, 1), 2)}
        call = {"name": "search", "arguments": {"model": rng.choice(tiers), "query": problem}}
        messages = [{"role": "system", "content": DEFAULT_SYSTEM},
                    {"role": "user", "content": f"Problem: {problem}\n\n{preference_text(pref, i % 2 == 1)}"},
                    {"role": "assistant", "content": f"<think>{problems[i + 1]}</think>\n<tool_call>"
                                                     f"{json.dumps(call)}</tool_call>"},
                    {"role": "tool", "content": problems[i + 2]}]
        parts.append(template.render(messages=messages, tools=schemas if i % 3 == 0 else None,
                                     add_generation_prompt=True))
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- the tiny tokenizer
def _train_tiny_tokenizer(text: str, vocab_size: int):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    n_added = len(SPECIAL_TOKENS) + len(TOOL_TOKENS)
    if vocab_size < 256 + n_added + 16:
        raise ValueError(f"tiny vocab_size {vocab_size} is too small for a byte-level BPE (need >= {256 + n_added + 16})")
    tok = Tokenizer(models.BPE())
    # add_prefix_space=False and no normalizer: encode/decode round-trips any text byte for byte.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(TOOL_TOKENS), min_frequency=1, show_progress=False,
                                  special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in TOOL_TOKENS])
    # Fill the model's vocab exactly: a random policy can sample any id, and every id must decode.
    reserved = [f"<|reserved_{i}|>" for i in range(vocab_size - tok.get_vocab_size())]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in reserved])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, clean_up_tokenization_spaces=False,
                                   model_max_length=1 << 20)
    fast.chat_template = chatml_template()
    return fast


def tiny_tokenizer_dir(tiny: TinyModelConfig | None = None, cache_dir: str = "~/.cache/orchestra") -> Path:
    tiny = tiny or TinyModelConfig()
    text = corpus_text()
    digest = hashlib.sha256(f"{text}\x00{tiny.vocab_size}".encode()).hexdigest()[:16]
    final = Path(cache_dir).expanduser() / f"tiny-tokenizer-{digest}"
    return atomic_build(final, lambda tmp: _train_tiny_tokenizer(text, tiny.vocab_size).save_pretrained(tmp))


def finish_tokenizer(tok: Any, chat_template: str, default_template: bool) -> Any:
    if chat_template:
        tok.chat_template = resolve_template(chat_template)
    elif default_template or not getattr(tok, "chat_template", None):
        tok.chat_template = chatml_template()
    if tok.pad_token_id is None:
        for name in ("<|endoftext|>", "<|im_end|>"):
            tid = single_token_id(tok, name)
            if tid is not None:
                tok.pad_token = name
                break
        else:
            tok.pad_token = tok.eos_token
    return tok
