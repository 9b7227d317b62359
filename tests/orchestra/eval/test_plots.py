"""Tool-mix bands (orchestra/eval/tool_bands.py) and the charts drawn from them (orchestra/eval/plots.py):
invented tier ids pooled into one "invalid" band, bands ordered by tool then tier, unique legend entries and
colours, and routing_by_preset.png written only when a learned policy ran under two or more presets."""

from __future__ import annotations

import pytest

from orchestra.eval.plots import band_colours, tool_mix_figure
from orchestra.eval.report import write_report
from orchestra.eval.tool_bands import INVALID, band_shares, catalogue_ids, looks_valid, tool_bands
from orchestra.types import Task

CATALOGUE = {"search-1", "reasoner-1", "answer-1", "answer-2", "answer-4", "answer-math-1", "calculator"}
# what a badly trained policy writes (taken from a real cpu_tiny run's metrics.jsonl)
INVENTED = ["-1", "146-2", "answer-", "search--1", "answerreasoner-3", "answer1", "answer-adanswer-1",
            "reasoner-answer-3", "answer"]


def test_invented_ids_land_in_one_invalid_band():
    ids = ["answer-2", "search-1", "answer-math-1", "reasoner-1", "calculator", "answer-4", "answer-1",
           "answer-9", *INVENTED]
    bands = tool_bands(ids, CATALOGUE)
    assert [b.label for b in bands] == ["search-1", "reasoner-1", "answer-1", "answer-2", "answer-4",
                                        "answer-math-1", "calculator", INVALID]
    assert [b.tool for b in bands[:-1]] == ["search", "enhance_reasoning", *["answer"] * 4, "calculator"]
    # answer-9 has the right shape but is no tier of these tasks: invalid too
    assert bands[-1].tool == INVALID and set(bands[-1].ids) == {"answer-9", *INVENTED}
    assert [(b.shade, b.shades) for b in bands if b.tool == "answer"] == [(0, 4), (1, 4), (2, 4), (3, 4)]
    mix = {"answer-1": 0.5, "-1": 0.2, "146-2": 0.1, "answer-9": 0.2}
    assert band_shares(mix, bands) == pytest.approx([0, 0, 0.5, 0, 0, 0, 0, 0.5])
    assert tool_bands(["answer-1", "search-1"], CATALOGUE)[-1].tool != INVALID  # no empty invalid band


def test_without_a_catalogue_the_shape_decides():
    assert all(looks_valid(t) for t in ("answer-1", "answer-math-2", "reasoner-3", "search-12", "calculator"))
    assert not any(looks_valid(t) for t in INVENTED)
    bands = tool_bands(["answer-2", "answer-10", "-1", "146-2", "search-2"])
    assert [b.label for b in bands] == ["search-2", "answer-2", "answer-10", INVALID]  # tiers by number
    assert bands[-1].ids == ("-1", "146-2")


def test_catalogue_from_tasks():
    mapping = {"search-1": "a", "reasoner-1": "b", "answer-1": "c", "expert-1": "d"}
    tasks = [Task(id="t0", problem="p", answer="1", tools=["search", "answer", "calculator"], model_mapping=mapping),
             Task(id="t1", problem="p", answer="1", tools=["enhance_reasoning"])]
    # t0: its own tiers of the tools it has (no reasoner, no tier of an unknown tool), calculator by name;
    # t1: no model_mapping, so the zoo's tiers, as the tools resolve them
    assert catalogue_ids(tasks, {"reasoner-2": "x", "answer-3": "y"}) == {"search-1", "answer-1", "calculator",
                                                                          "reasoner-2"}


def test_legend_entries_and_colours_are_unique():
    rows = [{"policy": "strongest", "preference": "balanced", "tool_mix": {"answer-1": 1.0}},
            {"policy": "orchestrator", "preference": "balanced",
             "tool_mix": {"search-1": 0.2, "reasoner-1": 0.1, "answer-2": 0.3, "answer-4": 0.2, "-1": 0.1,
                          "146-2": 0.05, "calculator": 0.05}},
            {"policy": "orchestrator", "preference": "cost-first", "tool_mix": {"answer-4": 0.9, "answer-": 0.1}}]
    fig = tool_mix_figure(rows, CATALOGUE)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["search-1", "reasoner-1", "answer-1", "answer-2", "answer-4", "calculator", "invalid (3 ids)"]
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["strongest", "orchestrator (balanced)", "orchestrator (cost-first)"]
    bands = tool_bands([k for r in rows for k in r["tool_mix"]], CATALOGUE)
    colours = band_colours(bands)
    assert len(set(colours)) == len(colours)
    import matplotlib.pyplot as plt

    plt.close(fig)


def _records(prefs: list[str]) -> list[dict]:
    def rec(policy, pref, seed, counts):
        return {"policy": policy, "preference": pref, "seed": seed, "task_id": "t0", "correct": True,
                "reward": 0.5, "cost_usd": 0.01, "latency_s": 1.0, "tool_counts": counts, "termination": "answered"}

    out = [rec("strongest", prefs[0], s, {"answer-1": 1}) for s in (0, 1)]
    for i, pref in enumerate(prefs):
        for policy in ("orchestrator", "estimator"):
            out += [rec(policy, pref, s, {"answer-1" if i == 0 else "answer-4": 1, "146-2": s}) for s in (0, 1)]
    return out


def test_routing_chart_only_for_multi_preset_reports(tmp_path):
    multi = write_report(_records(["accuracy-first", "cost-first"]), tmp_path / "multi", catalogue=CATALOGUE)
    chart = tmp_path / "multi" / "routing_by_preset.png"
    assert str(chart) in multi["plots"] and chart.stat().st_size > 1000
    single = write_report(_records(["balanced"]), tmp_path / "single", catalogue=CATALOGUE)
    assert not (tmp_path / "single" / "routing_by_preset.png").exists()
    assert [p.rsplit("/", 1)[1] for p in single["plots"]] == ["pareto.png", "tool_mix.png"]


def test_pareto_colour_is_the_preset_and_marker_the_policy():
    """12 series (the report that ran out of a 10-colour cycle): each preset one colour, each policy one marker,
    fixed routers black, every legend entry once."""
    import matplotlib.colors as mc
    import matplotlib.pyplot as plt

    from orchestra.eval.plots import pareto_figure

    prefs = ["accuracy-first", "balanced", "cost-first", "latency-first", "sweep:cost=0.3"]
    rows = [{"policy": p, "preference": "balanced", "cost_cents": 0.1 * i, "accuracy": 0.5}
            for i, p in enumerate(("strongest", "cheapest", "random"))]
    rows += [{"policy": pol, "preference": pref, "cost_cents": 0.2, "accuracy": 0.6}
             for pol in ("orchestrator", "estimator") for pref in prefs[:4]]
    rows.append({"policy": "orchestrator", "preference": prefs[4], "cost_cents": 0.3, "accuracy": 0.7})
    fig = pareto_figure(rows)
    ax = fig.axes[0]
    data = [c.lines[0] for c in ax.containers]  # each errorbar's data line (its caps are lines too)
    series = [(line.get_marker(), mc.to_hex(line.get_color())) for line in data]
    by_pref = {}
    for r, (marker, colour) in zip(rows, series, strict=True):
        assert marker == {"strongest": "^", "cheapest": "v", "random": "x", "orchestrator": "*",
                          "estimator": "D"}[r["policy"]]
        if r["policy"] in ("strongest", "cheapest", "random"):
            assert colour == "#000000"
        else:
            by_pref.setdefault(r["preference"], set()).add(colour)
    assert all(len(c) == 1 for c in by_pref.values())  # one colour per preset ...
    assert len({next(iter(c)) for c in by_pref.values()}) == len(prefs)  # ... and no two presets share one
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(legend) == len(set(legend)) and set(prefs) <= set(legend)
    plt.close(fig)
