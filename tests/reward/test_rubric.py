"""Rubrics: golden examples computed by hand for `toolorchestra` and `scalar`, and hypothesis properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reward.advantages import group_advantages
from reward.cost import episode_cost, episode_latency
from reward.rubric import scalar_reward, toolorchestra_group
from tests.helpers.episodes import build_episode

P = {"accuracy": 1.0, "cost": 0.5, "latency": 0.25, "tool:search": 0.2}


def test_toolorchestra_golden_by_hand(episode):
    trajs = [episode(tool_counts={"search": 1}), episode(tool_counts={"search": 2, "expert-1": 1}),
             episode(tool_counts={})]
    got = toolorchestra_group(trajs, [True, True, False], [0.01, 0.03, 0.02], [2.0, 4.0, 1.0], P)
    # accuracy [1,1,0] -> x̂ [1,1,0]; cost [-.01,-.03,-.02] -> [1, 0, .5]; latency [-2,-4,-1] -> [2/3, 0, 1];
    # tool:search [1,2,0] -> [.5, 1, 0]; tool:expert-1 has no weight.
    # R0 = 1 + .5*1 + .25*(2/3) + .2*.5 = 53/30 ; R1 = 1 + 0 + 0 + .2*1 = 6/5 ; R2 = 0 (incorrect)
    assert got[0].value == pytest.approx(53 / 30)
    assert got[0].terms == pytest.approx({"accuracy": 1.0, "cost": 0.5, "latency": 1 / 6, "tool:search": 0.1})
    assert got[1].value == pytest.approx(6 / 5)
    assert got[1].terms == pytest.approx({"accuracy": 1.0, "cost": 0.0, "latency": 0.0, "tool:search": 0.2})
    assert got[2].value == 0.0 and not got[2].correct and set(got[2].terms.values()) == {0.0}
    assert got[2].normalized["latency"] == 1.0  # incorrect episodes still shape the group's min-max
    assert got[1].features == {"accuracy": 1.0, "cost": -0.03, "latency": -4.0, "tool:expert-1": 1.0,
                               "tool:search": 2.0}
    for r in got:
        assert sum(r.terms.values()) == pytest.approx(r.value)
    # mean 89/90; deviations 7/9, 19/90, -89/90; sample var = (.604938 + .044568 + .977901)/2 = .813704
    adv, dropped = group_advantages([r.value for r in got])
    std = 0.8137037037 ** 0.5
    assert not dropped and adv == pytest.approx([(7 / 9) / std, (19 / 90) / std, (-89 / 90) / std], rel=1e-5)


def test_constant_feature_contributes_nothing(episode):
    trajs = [episode(), episode()]
    got = toolorchestra_group(trajs, [True, True], [0.02, 0.02], [1.0, 3.0], {"accuracy": 1, "cost": 1,
                                                                              "latency": 1})
    assert [r.terms["accuracy"] for r in got] == [0.0, 0.0]  # everyone right: accuracy is constant
    assert [r.terms["cost"] for r in got] == [0.0, 0.0]
    assert [r.value for r in got] == [1.0, 0.0]


def test_scalar_golden_from_the_issue(episode):
    # P = {accuracy 1, cost 2, latency 0.01}, tool costs [0.01, 0.02], 3 s -> 1 - 2*0.03 - 0.01*3 = 0.91
    traj = episode(charges=[("search", 0.01, 1.0), ("expert-1", 0.02, 2.0)])
    r = scalar_reward(True, episode_cost(traj).total_usd, episode_latency(traj), traj.tool_counts,
                      {"accuracy": 1, "cost": 2, "latency": 0.01}, cost_scale=1, latency_scale=1)
    assert r.value == pytest.approx(0.91)
    assert r.terms == pytest.approx({"accuracy": 1.0, "cost": -0.06, "latency": -0.03})
    # default scales ($0.01, 10 s) and a liked tool: 1 - 2*3 - 0.01*0.3 + 0.5*1 = -4.503
    r = scalar_reward(True, 0.03, 3.0, {"search": 1}, {"accuracy": 1, "cost": 2, "latency": 0.01,
                                                       "tool:search": 0.5})
    assert r.value == pytest.approx(-4.503) and r.terms["tool:search"] == 0.5


def test_bad_inputs():
    with pytest.raises(ValueError, match="3 verdicts"):
        toolorchestra_group([None, None], [True, True, False], [0, 0], [0, 0], P)
    with pytest.raises(ValueError, match="unknown"):
        scalar_reward(True, 0.0, 0.0, {}, {"speed": 1.0})
    with pytest.raises(ValueError, match="cost_scale"):
        scalar_reward(True, 0.0, 0.0, {}, P, cost_scale=0)


# ---------------------------------------------------------------- properties
cents = st.integers(0, 500).map(lambda c: c / 1000)  # $ on a 0.1-cent grid
seconds = st.integers(0, 600).map(lambda s: s / 10)
weights = st.fixed_dictionaries({"accuracy": st.floats(0.5, 2), "cost": st.floats(0.01, 2),
                                 "latency": st.floats(0, 1), "tool:search": st.floats(-1, 1)})


@st.composite
def groups(draw, min_size=2):
    n = draw(st.integers(min_size, 8))
    correct = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    costs = draw(st.lists(cents, min_size=n, max_size=n))
    lats = draw(st.lists(seconds, min_size=n, max_size=n))
    tools = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    return correct, costs, lats, tools


def _trajs(tools):
    return [build_episode(tool_counts={"search": t} if t else {}) for t in tools]


@settings(max_examples=60, deadline=None)
@given(groups(), weights, st.integers(1, 500).map(lambda c: c / 100))
def test_adding_constant_dollars_changes_nothing(group, pref, extra):
    correct, costs, lats, tools = group
    trajs = _trajs(tools)
    base = toolorchestra_group(trajs, correct, costs, lats, pref)
    shifted = toolorchestra_group(trajs, correct, [c + extra for c in costs], lats, pref)
    assert [r.value for r in shifted] == pytest.approx([r.value for r in base], abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(groups(), weights, st.integers(0, 7), st.integers(1, 500).map(lambda c: c / 1000))
def test_correct_reward_falls_as_cost_rises(group, pref, pick, more):
    correct, costs, lats, tools = group
    i = pick % len(costs)
    correct = [*correct[:i], True, *correct[i + 1:]]
    trajs = _trajs(tools)
    before = toolorchestra_group(trajs, correct, costs, lats, pref)[i].value
    dearer = [*costs[:i], costs[i] + more, *costs[i + 1:]]
    after = toolorchestra_group(trajs, correct, dearer, lats, pref)[i].value
    assert after <= before + 1e-12
    s0 = scalar_reward(True, costs[i], lats[i], {}, pref).value
    assert scalar_reward(True, costs[i] + more, lats[i], {}, pref).value < s0


@settings(max_examples=60, deadline=None)
@given(groups(), weights)
def test_incorrect_is_always_zero(group, pref):
    correct, costs, lats, tools = group
    for ok, r in zip(correct, toolorchestra_group(_trajs(tools), correct, costs, lats, pref), strict=True):
        if not ok:
            assert r.value == 0.0 and all(v == 0.0 for v in r.terms.values())


@settings(max_examples=60, deadline=None)
@given(groups(), st.fixed_dictionaries({"accuracy": st.floats(0.5, 2), "cost": st.floats(0, 2),
                                        "latency": st.floats(0, 1), "tool:search": st.floats(0, 1)}),
       st.integers(0, 7))
def test_lone_correct_episode_gets_the_top_advantage(group, pref, pick):
    _, costs, lats, tools = group
    i = pick % len(costs)
    correct = [j == i for j in range(len(costs))]
    rewards = [r.value for r in toolorchestra_group(_trajs(tools), correct, costs, lats, pref)]
    adv, dropped = group_advantages(rewards)
    assert not dropped
    assert adv[i] == max(adv) and adv[i] > 0 and all(a < adv[i] for j, a in enumerate(adv) if j != i)
