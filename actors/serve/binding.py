"""Binding a trained run's experts to live OpenAI-compatible endpoints for serving (`make serve ARGS="checkpoint=
runs/X experts=FILE"`).

A policy learns to call tiers (`answer-1`, `search-2`, ...) that its run's config maps to named experts
(orchestra.config.task_tiers); in training those may be simulated or replayed. A binding file says where each
expert really runs:

    gpt-5:      {base_url: https://api.openai.com/v1, api_key_env: OPENAI_API_KEY, model: gpt-5}
    qwen3-32b:  {base_url: http://10.0.0.5:8000/v1, api_key_env: "", model: Qwen/Qwen3-32B,
                 price_in_per_mtok: 0.1, price_out_per_mtok: 0.3}

Optional keys: price_in_per_mtok / price_out_per_mtok ($ per million tokens; without them genai-prices prices
`model`), max_tokens, timeout_s, latency_s (default: the run's values). A zoo file (a top-level `experts:`
mapping, e.g. conf/zoo/openai.yaml) is read the same way, so a run trained on the simulated zoo is served
against ToolOrchestra's real roster with `experts=conf/zoo/openai.yaml`.

`bind_experts(cfg, path)` returns a copy of `cfg` whose bound experts are `kind: openai`; it refuses, with one
line naming them, a binding that leaves an expert a trained tier maps to unbound, and an entry that has an
unknown key, a `REPLACE_ME` placeholder or no price. Experts the file names but the run does not have are
ignored (one roster file serves many runs). `run_config(checkpoint)` finds the config a checkpoint was trained
with. Calling the endpoints (streaming, retries, usage-based $) is tools/experts/openai.py's job; the CLI
(cluster/serve.py) and the replica builder (actors/serve/wiring.py) call this module.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from orchestra.config import ConfigError, ExperimentConfig, ExpertConfig, task_tiers

FIELDS = ("base_url", "api_key_env", "model", "price_in_per_mtok", "price_out_per_mtok", "max_tokens", "timeout_s",
          "latency_s")
NUMBERS = ("price_in_per_mtok", "price_out_per_mtok", "max_tokens", "timeout_s", "latency_s")
PLACEHOLDER = "REPLACE_ME"  # what cluster/routing_log.py's template leaves for the user to fill in


def read_binding(path: str | Path) -> dict[str, dict[str, Any]]:
    """expert name -> its endpoint entry, checked key by key (ConfigError naming the file, expert and key)."""
    import yaml

    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"experts={path}: no such file")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"experts={path}: cannot parse YAML: {str(e).splitlines()[0]}") from None
    if isinstance(doc, dict) and isinstance(doc.get("experts"), dict):
        doc = doc["experts"]  # a zoo file: its experts are the binding
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"experts={path}: expected a mapping of expert name -> {{base_url, api_key_env, model}}")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in doc.items():
        where = f"experts={path}: {name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with base_url, api_key_env and model")
        entry = dict(entry)
        kind = entry.pop("kind", "openai")
        if kind != "openai":
            raise ConfigError(f"{where}.kind is {kind!r}: a binding maps experts to OpenAI-compatible endpoints")
        for key, value in entry.items():
            if key not in FIELDS:
                raise ConfigError(f"{where}.{key}: unknown key; an entry takes {', '.join(FIELDS)}")
            if value is None:
                continue  # `api_key_env:` left empty: no key (a local vLLM)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (number if key in NUMBERS else isinstance(value, str)):
                raise ConfigError(f"{where}.{key}: expected {'a number' if key in NUMBERS else 'a string'}, "
                                  f"got {value!r}")
        out[str(name)] = entry
    return out


def _check_entry(path: str | Path, name: str, entry: dict[str, Any]) -> None:
    """A used entry: a real endpoint (no placeholder) and a price (genai-prices or both overrides)."""
    from tools.pricing import PriceTable, UnknownModelError

    where = f"experts={path}: {name}"
    for key in ("base_url", "api_key_env", "model"):
        if PLACEHOLDER in str(entry.get(key) or ""):
            raise ConfigError(f"{where}.{key} is still the placeholder {entry[key]!r}: fill in where {name} is served")
    if not entry.get("base_url"):
        raise ConfigError(f"{where}: base_url is missing (the endpoint, e.g. https://api.openai.com/v1 or "
                          "http://HOST:8000/v1 for vLLM)")
    priced = [entry.get(k) is not None for k in ("price_in_per_mtok", "price_out_per_mtok")]
    if any(priced) and not all(priced):
        raise ConfigError(f"{where}: give both price_in_per_mtok and price_out_per_mtok")
    model = entry.get("model") or name
    table = PriceTable({model: (entry["price_in_per_mtok"], entry["price_out_per_mtok"])} if all(priced) else None)
    try:
        table.price(model)
    except UnknownModelError:
        raise ConfigError(f"{where}: no price for model {model!r} (genai-prices does not know it): add "
                          "price_in_per_mtok and price_out_per_mtok ($ per million tokens) to its entry") from None


def bind_experts(cfg: ExperimentConfig, path: str | Path) -> ExperimentConfig:
    """A copy of `cfg` with the experts `path` binds served by their endpoints; ConfigError (one line) when a tier
    the policy was trained on maps to an expert the file leaves unbound, or a used entry is unusable."""
    binding = read_binding(path)
    tiers = task_tiers(cfg)
    missing: dict[str, list[str]] = {}
    for tier, expert in sorted(tiers.items()):
        if expert not in binding:
            missing.setdefault(expert, []).append(tier)
    if missing:
        named = "; ".join(f"{e} (tier{'s' if len(t) > 1 else ''} {', '.join(t)})" for e, t in missing.items())
        raise ConfigError(f"experts={path} does not bind {named}, which the policy was trained to call: add "
                          f"{'them' if len(missing) > 1 else 'it'} with base_url, api_key_env and model "
                          f"(the file binds: {', '.join(binding)})")
    out = copy.deepcopy(cfg)
    for name, entry in binding.items():
        old = out.zoo.experts.get(name)
        if old is None:
            continue  # a roster may bind more experts than this run has
        _check_entry(path, name, entry)
        # prices come from the binding or genai-prices, never from the trained zoo's entry: a simulated expert's
        # override was keyed by its own model name and says nothing about what the live endpoint charges
        out.zoo.experts[name] = ExpertConfig(
            kind="openai", model=entry.get("model") or name, base_url=entry["base_url"],
            api_key_env=entry.get("api_key_env") or "", price_in_per_mtok=entry.get("price_in_per_mtok"),
            price_out_per_mtok=entry.get("price_out_per_mtok"),
            max_tokens=int(entry.get("max_tokens") or old.max_tokens),
            timeout_s=float(entry.get("timeout_s") or old.timeout_s),
            latency_s=float(entry.get("latency_s") or old.latency_s))
    return out


def run_config(checkpoint: str | Path) -> Path | None:
    """The config a checkpoint was trained with: <run>/config.yaml (the local trainer's, for a run dir or a
    checkpoint inside it), or orchestra_config.yaml in or beside a verl HF export. None when there is none."""
    p = Path(checkpoint).expanduser()
    if not p.exists():
        return None
    if (p / "checkpoints").is_dir() and (p / "config.yaml").is_file():
        return p / "config.yaml"
    for candidate in (p / "orchestra_config.yaml", p.parent / "orchestra_config.yaml"):
        if candidate.is_file():
            return candidate
    for parent in p.resolve().parents:  # runs/X/checkpoints/step_N[/learner]
        if parent.name == "checkpoints" and (parent.parent / "config.yaml").is_file():
            return parent.parent / "config.yaml"
    return None
