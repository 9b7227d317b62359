"""Preference-paired GRPO (data.preference_pairs): one step rolls each task out under several preference vectors,
one group per (task, vector), and every episode is scored under its own vector with its own group's baseline."""

from __future__ import annotations

import pytest

from cluster.rollouts import paired_tasks, step_requests
from orchestra.config import ConfigError, load_config
from orchestra.preferences import PRESETS, paired_preferences, parse_pairs
from orchestra.types import Task
from reward.score import score_group
from tests.helpers.episodes import build_episode
from tests.helpers.fakes import make_task

PAIRS = "accuracy-first|balanced|cost-first"


def test_each_task_is_rolled_out_under_every_vector_in_its_own_groups():
    tasks = [make_task(0), make_task(1)]
    reqs = step_requests(tasks, step=3, group_size=4, pairs=PAIRS, seed=0)
    assert len(reqs) == 2 * 3 * 4
    groups: dict[str, list[dict]] = {}
    for r in reqs:
        groups.setdefault(r["uid"], []).append(r)
    assert len(groups) == 6 and all(len(g) == 4 and g[0]["group_size"] == 4 for g in groups.values())
    for t in tasks:
        prefs = [g[0]["task"]["pref"] for g in groups.values() if g[0]["task"]["id"] == t.id]
        assert prefs == [PRESETS["accuracy-first"], PRESETS["balanced"], PRESETS["cost-first"]]
    for g in groups.values():  # a group is one task under one vector: the same problem, the same pref
        assert len({(r["task"]["id"], tuple(sorted(r["task"]["pref"].items()))) for r in g}) == 1
    assert tasks[0].pref == {"accuracy": 1.0, "cost": 0.5, "latency": 0.0}  # the task itself is untouched
    plain = step_requests(tasks, step=3, group_size=4)
    assert len(plain) == 8 and len({r["uid"] for r in plain}) == 2


def test_sampled_vectors_are_per_task_and_step_and_repeatable():
    a = paired_preferences("sampled:3", "t1", step=5, seed=0)
    assert len(a) == 3 and len({tuple(sorted(p.items())) for p in a}) == 3
    assert a == paired_preferences("sampled:3", "t1", step=5, seed=0)  # a resumed run draws the same
    assert a != paired_preferences("sampled:3", "t1", step=6, seed=0)
    assert a != paired_preferences("sampled:3", "t2", step=5, seed=0)


@pytest.mark.parametrize("spec", ["balanced", "sampled:1", "sampled:x", "balanced|bogus"])
def test_bad_pairings_are_refused_naming_the_key(spec):
    with pytest.raises(ValueError):
        parse_pairs(spec)
    with pytest.raises(ConfigError, match="data.preference_pairs"):
        load_config([f"data.preference_pairs={spec}"])


def test_paired_sft_plays_every_task_under_every_vector_whole_tasks_first():
    tasks = [make_task(0), make_task(1)]
    out = paired_tasks(tasks, "accuracy-first|cost-first")
    assert [t.id for t in out] == [tasks[0].id, tasks[0].id, tasks[1].id, tasks[1].id]
    assert [t.pref for t in out] == [PRESETS["accuracy-first"], PRESETS["cost-first"]] * 2
    assert all(t.problem == tasks[i // 2].problem for i, t in enumerate(out))
    assert tasks[0].pref == {"accuracy": 1.0, "cost": 0.5, "latency": 0.0}  # copies: the task list is untouched
    sampled = paired_tasks(tasks, "sampled:3", seed=1)
    assert len(sampled) == 6 and sampled[0].pref != sampled[1].pref
    assert [t.pref for t in sampled] == [t.pref for t in paired_tasks(tasks, "sampled:3", seed=1)]
    with pytest.raises(ConfigError, match="sft.paired"):
        load_config(["sft.paired=true", "data.preference_pairs=''"])


async def test_the_same_episodes_score_under_their_own_vector_against_their_own_group():
    """Identical outcomes under two vectors: gpt-5-like (right, $0.01) and a cheap expert (wrong, ~$0). Under
    accuracy-first the expensive right answer is the better episode; under cost-first the worse one."""
    reqs = step_requests([make_task(0, answer="4")], step=1, group_size=2, pairs="accuracy-first|cost-first")
    trajs, tasks = [], []
    for i, r in enumerate(reqs):
        right = i % 2 == 0
        trajs.append(build_episode(uid=r["uid"], answer="4" if right else "5",
                                   charges=[("answer-1" if right else "answer-4", 0.01 if right else 0.0001, 1.0)]))
        tasks.append(Task.from_dict(r["task"]))
    out = await score_group(trajs, tasks, rubric="scalar", cost_scale=0.01, latency_scale=10.0, min_std=0.0)
    acc = PRESETS["accuracy-first"]
    cost = PRESETS["cost-first"]
    # each under its own vector: R = acc*r - cost*$/0.01 - latency*s/10
    assert out[0].reward == pytest.approx(1 - acc["cost"] * 1.0 - acc["latency"] * 0.1)
    assert out[1].reward == pytest.approx(0 - acc["cost"] * 0.01 - acc["latency"] * 0.1)
    assert out[2].reward == pytest.approx(1 - cost["cost"] * 1.0 - cost["latency"] * 0.1)
    assert out[3].reward == pytest.approx(0 - cost["cost"] * 0.01 - cost["latency"] * 0.1)
    # baselines are per (task, vector): the same route gets opposite advantages under the two vectors
    assert out[0].uid == out[1].uid != out[2].uid == out[3].uid
    assert out[0].advantage > 0 > out[1].advantage
    assert out[2].advantage < 0 < out[3].advantage
