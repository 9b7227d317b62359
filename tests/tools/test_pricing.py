"""PriceTable: genai-prices lookups, explicit overrides, provider prefixes, and unknown models as config errors."""

from __future__ import annotations

import pytest
from genai_prices import Usage, calc_price

from orchestra.config import ConfigError, ExpertConfig, ZooConfig
from tools.pricing import PriceTable, UnknownModelError
from tools.registry import build_experts


def _genai_per_mtok(model: str, provider: str | None = None) -> tuple[float, float]:
    one_in = calc_price(Usage(input_tokens=1_000_000, output_tokens=0), model, provider_id=provider)
    one_out = calc_price(Usage(input_tokens=0, output_tokens=1_000_000), model, provider_id=provider)
    return float(one_in.total_price), float(one_out.total_price)


def test_known_models_priced_from_genai_prices():
    table = PriceTable()
    for model in ("gpt-5", "gpt-5-mini", "claude-3-haiku-20240307"):
        assert table.price(model) == pytest.approx(_genai_per_mtok(model))
        p_in, p_out = table.price(model)
        assert p_in > 0 and p_out > 0
        assert table.cost(model, 2000, 500) == pytest.approx((2000 * p_in + 500 * p_out) / 1e6)


def test_overrides_win_and_unknown_models_are_errors():
    table = PriceTable({"my-selfhosted-32b": (0.1, 0.3), "gpt-5": (9.0, 9.0)})
    assert table.cost("my-selfhosted-32b", 1_000_000, 1_000_000) == pytest.approx(0.4)
    assert table.price("gpt-5") == (9.0, 9.0)
    with pytest.raises(UnknownModelError, match="no-such-model-xyz"):
        table.cost("no-such-model-xyz", 10, 10)
    assert not table.known("no-such-model-xyz")
    assert issubclass(UnknownModelError, ConfigError)
    with pytest.raises(ConfigError, match="must be a number >= 0"):
        PriceTable({"m": (-1.0, 0.0)})


def test_provider_prefix_and_long_context_tiers():
    table = PriceTable()
    ref = "together:mistralai/Mistral-7B-Instruct-v0.2"
    assert table.price(ref) == pytest.approx(_genai_per_mtok("mistralai/Mistral-7B-Instruct-v0.2", "together"))
    # Gemini 1.5 Pro charges more past its long-context threshold; the table defers to genai-prices there.
    p_in, p_out = table.price("gemini-1.5-pro-002")
    long = table.cost("gemini-1.5-pro-002", 200_000, 1000)
    exact = float(calc_price(Usage(input_tokens=200_000, output_tokens=1000), "gemini-1.5-pro-002").total_price)
    assert long == pytest.approx(exact) and long > (200_000 * p_in + 1000 * p_out) / 1e6


def test_zoo_load_rejects_unpriced_expert_by_name():
    zoo = ZooConfig(experts={"mystery": ExpertConfig(kind="sim", model="mystery-model-9000", skill={"a": 0.5})},
                    tiers={})
    with pytest.raises(UnknownModelError, match="zoo.experts.mystery"):
        build_experts(zoo)
    half = ZooConfig(experts={"m": ExpertConfig(kind="sim", price_in_per_mtok=0.1, skill={"a": 0.5})}, tiers={})
    with pytest.raises(ConfigError, match="both price_in_per_mtok and price_out_per_mtok"):
        build_experts(half)
