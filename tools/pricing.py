"""What an expert's tokens cost: genai-prices for public models, explicit overrides for self-hosted ones.

`PriceTable.price(model)` gives ($ per million input tokens, $ per million output tokens) at the model's base
tier; `PriceTable.cost(model, tokens_in, tokens_out)` gives the $ of one call (genai-prices applies its own
tiers, e.g. Gemini's long-context prices). A model that genai-prices does not know and that has no override is
an `UnknownModelError` (a ConfigError) when the zoo is loaded -- never a silent $0.

A model reference may name the genai-prices provider as `provider:model`, e.g.
`together:meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo`, when the bare name is ambiguous or unknown.
Budgets, ledgers and per-task price overrides (Task.pricing) are left to the callers.
"""

from __future__ import annotations

import math
from typing import Any

from orchestra.config import ConfigError

MTOK = 1_000_000


class UnknownModelError(ConfigError):
    """A model with no price: not in genai-prices and no explicit override."""


def split_ref(model: str) -> tuple[str | None, str]:
    """`provider:model` -> (provider, model) when the prefix is a genai-prices provider id; else (None, model)
    (so a served name with a colon of its own, e.g. `llama3:8b`, is left whole)."""
    if ":" in model and "/" not in model.split(":", 1)[0]:
        prefix, rest = model.split(":", 1)
        from genai_prices.data_snapshot import get_snapshot

        if any(p.id == prefix for p in get_snapshot().providers):
            return prefix, rest
    return None, model


class PriceTable:
    """Prices per model name. Overrides win over genai-prices; lookups are cached (the table is static)."""

    def __init__(self, overrides: dict[str, tuple[float, float]] | None = None):
        self.overrides: dict[str, tuple[float, float]] = {}
        self._base: dict[str, tuple[float, float]] = {}
        for model, (p_in, p_out) in (overrides or {}).items():
            self.set_override(model, p_in, p_out)

    def set_override(self, model: str, in_per_mtok: float, out_per_mtok: float) -> None:
        for label, v in (("input", in_per_mtok), ("output", out_per_mtok)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"price override for {model!r}: {label} $/Mtok must be a number >= 0, got {v!r}")
        self.overrides[model] = (float(in_per_mtok), float(out_per_mtok))
        self._base.pop(model, None)

    @classmethod
    def from_experts(cls, experts: dict[str, Any]) -> PriceTable:
        """Overrides from expert configs (objects or dicts with `model`, `price_in_per_mtok`, `price_out_per_mtok`)."""
        table = cls()
        for name, cfg in experts.items():
            get = cfg.get if isinstance(cfg, dict) else (lambda k, d=None, c=cfg: getattr(c, k, d))
            p_in, p_out = get("price_in_per_mtok"), get("price_out_per_mtok")
            if p_in is None and p_out is None:
                continue
            if p_in is None or p_out is None:
                raise ConfigError(f"zoo.experts.{name}: give both price_in_per_mtok and price_out_per_mtok")
            table.set_override(get("model") or name, p_in, p_out)
        return table

    def _genai(self, model: str, tokens_in: int, tokens_out: int) -> float:
        from genai_prices import Usage, calc_price  # lazy: only priced calls need the table

        provider, ref = split_ref(model)
        try:
            calc = calc_price(Usage(input_tokens=int(tokens_in), output_tokens=int(tokens_out)), ref,
                              provider_id=provider)
        except LookupError:
            raise UnknownModelError(
                f"no price for model {model!r}: genai-prices does not know it; add price_in_per_mtok and "
                f"price_out_per_mtok to its expert entry (self-hosted models), or name the provider as "
                f"'provider:model'") from None
        return float(calc.total_price)

    def known(self, model: str) -> bool:
        try:
            self.price(model)
        except UnknownModelError:
            return False
        return True

    def price(self, model: str) -> tuple[float, float]:
        """($/Mtok input, $/Mtok output) at the base tier; raises UnknownModelError."""
        if model in self.overrides:
            return self.overrides[model]
        if model not in self._base:
            # Measured at 1k tokens so tiered models report their everyday (short-context) price.
            p_in = self._genai(model, 1000, 0) * 1000
            p_out = self._genai(model, 0, 1000) * 1000
            self._base[model] = (round(p_in, 10), round(p_out, 10))  # strip float dust from the x1000
        return self._base[model]

    def cost(self, model: str, tokens_in: int, tokens_out: int) -> float:
        """$ of one call with these token counts; raises UnknownModelError."""
        if tokens_in < 0 or tokens_out < 0:
            raise ValueError(f"token counts must be >= 0, got {tokens_in}, {tokens_out}")
        if model in self.overrides:
            p_in, p_out = self.overrides[model]
            return (tokens_in * p_in + tokens_out * p_out) / MTOK
        p_in, p_out = self.price(model)
        if tokens_in < 32_000:  # below every tier threshold genai-prices lists (lowest: 32k): plain arithmetic
            return (tokens_in * p_in + tokens_out * p_out) / MTOK
        return self._genai(model, tokens_in, tokens_out)
