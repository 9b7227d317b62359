"""Preference presets and the training sampler (orchestra/preferences.py)."""

import random

import pytest

from orchestra.preferences import COST_ORDER, PRESETS, parse_preference, preset, sample_preference
from orchestra.types import check_preference


def test_presets_valid_and_cost_weight_rises():
    assert set(PRESETS) == {"accuracy-first", "balanced", "cost-first", "latency-first"}
    for name in PRESETS:
        assert check_preference(preset(name)) == PRESETS[name]
    costs = [PRESETS[n]["cost"] for n in COST_ORDER]
    assert costs == sorted(costs) and len(set(costs)) == len(costs)
    assert max(PRESETS, key=lambda n: PRESETS[n]["latency"]) == "latency-first"


def test_preset_is_a_copy_and_unknown_lists_names():
    p = preset("balanced")
    p["cost"] = 99
    assert PRESETS["balanced"]["cost"] == 0.5
    with pytest.raises(ValueError, match="cost-first"):
        preset("cheap")


def test_parse_preference_forms():
    assert parse_preference("balanced") == PRESETS["balanced"]
    assert parse_preference("accuracy=1, cost=0.25,tool:search=-0.5") == {
        "accuracy": 1.0, "cost": 0.25, "tool:search": -0.5}
    with pytest.raises(ValueError, match="not key=number"):
        parse_preference("accuracy=high")
    with pytest.raises(ValueError, match="unknown"):
        parse_preference("speed=1")


def test_sample_preference_deterministic_and_covers_scheme():
    tools = ["answer-1", "answer-2", "search-1"]
    a = [sample_preference(random.Random(7), tools) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    rng = random.Random(0)
    draws = [sample_preference(rng, tools) for _ in range(400)]
    for d in draws:
        check_preference(d)
        assert 0.5 <= d["accuracy"] <= 1.0
        assert {"cost", "latency"} <= set(d)
        assert all(k[5:] in tools for k in d if k.startswith("tool:"))
    with_tools = [d for d in draws if any(k.startswith("tool:") for k in d)]
    presets = [d for d in draws if d in PRESETS.values()]
    assert 0.2 < len(with_tools) / 400 < 0.4  # tool_prob 0.3
    assert 0.1 < len(presets) / 400 < 0.35  # preset_prob 0.25 (some then gain tool weights)
    assert any(d["cost"] == 0.0 for d in draws) and any(d["latency"] > 0.5 for d in draws)
    assert any(v < 0 for d in with_tools for k, v in d.items() if k.startswith("tool:"))
