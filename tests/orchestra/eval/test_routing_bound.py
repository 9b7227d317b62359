"""The family-router frontier: a hand-computed case, brute force over every pure family->tier assignment on
random instances, and the real MMLU-Pro replay records (its ends are the per-family best and cheapest)."""

from __future__ import annotations

import itertools
import random

import pytest

from orchestra.data.synth.template import generate_tasks
from orchestra.eval.routing_bound import (
    best_accuracy_at,
    cheapest_reaching,
    family_frontier,
    outcomes_of_episodes,
    recorded_outcomes,
)
from orchestra.routing.plans import plan_scripts


def test_hand_computed_two_families():
    # family a: tier x costs 1 for 5 right, tier y costs 3 for 9 right (of 10); family b: x 1 -> 8, y 4 -> 9
    outcomes = {"a": {"x": (1.0, 5.0), "y": (3.0, 9.0)}, "b": {"x": (1.0, 8.0), "y": (4.0, 9.0)}}
    front = family_frontier(outcomes, 20)
    # start (2, 13); a's step (+2 $, +4) has slope 2 and goes first, then b's (+3 $, +1)
    assert front == [(2 / 20, 13 / 20), (4 / 20, 17 / 20), (7 / 20, 18 / 20)]
    assert best_accuracy_at(front, 3 / 20) == pytest.approx(15 / 20)  # half way along a's step
    assert best_accuracy_at(front, 1 / 20) == pytest.approx(6.5 / 20)  # under the cheapest: scaled to (0, 0)
    assert best_accuracy_at(front, 1.0) == pytest.approx(18 / 20)
    assert cheapest_reaching(front, 15 / 20) == pytest.approx(3 / 20)
    assert cheapest_reaching(front, 6.5 / 20) == pytest.approx(1 / 20)
    assert cheapest_reaching(front, 19 / 20) == float("inf")


def test_dominated_tiers_never_appear():
    # z costs more than y for fewer right answers; w lies under the chord x -> y
    outcomes = {"a": {"x": (1.0, 2.0), "w": (2.0, 3.0), "y": (3.0, 6.0), "z": (5.0, 5.0)}}
    assert family_frontier(outcomes, 10) == [(0.1, 0.2), (0.3, 0.6)]


@pytest.mark.parametrize("seed", range(20))
def test_matches_brute_force_over_assignments(seed):
    rng = random.Random(seed)
    fams, tiers = [f"f{i}" for i in range(rng.randint(1, 4))], ["t0", "t1", "t2"]
    outcomes = {f: {t: (round(rng.uniform(0.1, 5), 2), float(rng.randint(0, 10))) for t in tiers} for f in fams}
    n = 10 * len(fams)
    front = family_frontier(outcomes, n)
    pure = []
    for pick in itertools.product(tiers, repeat=len(fams)):
        cost = sum(outcomes[f][t][0] for f, t in zip(fams, pick, strict=True)) / n
        acc = sum(outcomes[f][t][1] for f, t in zip(fams, pick, strict=True)) / n
        pure.append((cost, acc))
    for cost, acc in pure:  # nothing a pure family router does is above the frontier
        assert acc <= best_accuracy_at(front, cost) + 1e-9
    for c, a in front:  # and every vertex is one of them
        assert any(abs(c - pc) < 1e-9 and abs(a - pa) < 1e-9 for pc, pa in pure)
    assert [c for c, _ in front] == sorted(c for c, _ in front)


def test_mmlu_pro_replay_records(shared_data):
    from orchestra.config import load_config
    from orchestra.data.loaders import load
    from tools.registry import build_experts

    cfg = load_config(["experiment=mmlu_pro_replay"])
    experts = build_experts(cfg.zoo)
    tasks = load("mmlu_pro", "routing/mmlu_pro", mapping=cfg.zoo.tiers).tasks
    outcomes, n = recorded_outcomes(tasks, cfg.zoo.tiers, experts)
    assert n == 12002 and len(outcomes) == 14  # SOURCES.md: the shared ids; MMLU-Pro's 14 subjects
    front = family_frontier(outcomes, n)
    best = sum(max(k for _, k in tiers.values()) for tiers in outcomes.values()) / n
    assert front[-1][1] == pytest.approx(best)  # the top is every subject's most accurate model
    pro = sum(tiers["answer-1"][1] for tiers in outcomes.values()) / n
    assert round(pro, 3) == 0.702 and best > pro  # flash beats pro on math and chemistry


def test_plan_scripts_and_outcomes_of_episodes():
    from orchestra.agent.scripted import call_text
    from orchestra.config import load_config
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    zoo = load_config().zoo
    task = generate_tasks(1, 0, split="heldout", mapping=zoo.tiers).tasks[0]
    plans = plan_scripts(LocalToolClient(build_tools(zoo)).schemas(task))
    # sim zoo: 6 answer tiers, alone or after one of 3 search or 3 reasoner tiers
    assert len(plans) == 6 * (1 + 3 + 3)
    assert plans["answer-4"] == [call_text("answer", {"model": "answer-4"})]
    assert plans["search-3+answer-2"] == [call_text("search", {"model": "search-3"}),
                                          call_text("answer", {"model": "answer-2"})]
    recs = [{"policy": p, "family": f, "cost_usd": c, "correct": k}
            for p, f, c, k in [("a", "x", 0.1, True), ("a", "y", 0.2, False), ("b", "x", 0.3, True),
                               ("b", "y", 0.4, True)]]
    outcomes, n = outcomes_of_episodes(recs)
    assert n == 2 and outcomes == {"x": {"a": (0.1, 1.0), "b": (0.3, 1.0)}, "y": {"a": (0.2, 0.0), "b": (0.4, 1.0)}}
    with pytest.raises(ValueError, match="different numbers"):
        outcomes_of_episodes(recs[:3])
