"""RewardActor: group barrier, deadline with a missing member (no hang), late and errored members, 100
groups interleaved from concurrent producers, counters through state/load_state, and one run through Ray."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from actors.reward_actor import RewardActor, remote_reward_actor
from orchestra.types import Task, ToolRecord, ToolResult, Trajectory

P = {"accuracy": 1.0, "cost": 1.0, "latency": 0.0}


def _task(i: int) -> dict:
    return Task(id=f"t{i}", problem=f"What is {i} + {i}?", answer=str(2 * i), pref=P).to_dict()


def _episode(i: int, k: int, right: bool, usd: float = 0.01, termination: str = "answered") -> dict:
    rec = ToolRecord(0, "search", "search", {}, ToolResult("ok", cost_usd=usd, latency_s=1.0))
    return Trajectory(task_id=f"t{i}", uid=f"u{i}", answer=str(2 * i) if right else "wrong",
                      termination=termination, tool_records=[rec], tool_counts={"search": 1},
                      episode_id=f"u{i}-{k}").to_dict()


async def test_complete_group_answers_every_caller():
    actor = RewardActor(group_deadline_s=30)
    got = await asyncio.gather(*(actor.submit(_episode(1, k, right=k < 2, usd=0.01 * (k + 1)), _task(1), 4)
                                 for k in range(4)))
    assert [g["traj_id"] for g in got] == [f"u1-{k}" for k in range(4)]
    # correct: k=0 ($.01) and k=1 ($.02); cost -[.01..04] -> x̂ [1, 2/3, 1/3, 0]; R = [2, 1+2/3, 0, 0]
    assert [g["reward"] for g in got] == pytest.approx([2.0, 5 / 3, 0.0, 0.0])
    assert sum(g["advantage"] for g in got) == pytest.approx(0.0, abs=1e-9)
    report = await actor.step_report()
    assert report["accuracy"] == 0.5 and report["groups_scored"] == 1 and report["deadline_fires"] == 0
    assert report["mean_cost_usd"] == pytest.approx(0.025) and report["mean_latency_s"] == 1.0
    assert report["tool_mix"] == {"search": 1.0} and report["pending_groups"] == 0
    assert (await actor.step_report())["episodes"] == 0  # counters reset per step


async def test_forget_takes_a_dead_workers_groups_back_so_a_replay_counts_once():
    """A rollout worker died mid-step (cluster/rollouts.Dispatch): of its groups, one was scored, one half-filled.
    Forgotten, then played again in full: the step's counters are those of one play, and nothing waits."""
    actor = RewardActor(group_deadline_s=30)
    await asyncio.gather(*(actor.submit(_episode(1, k, right=True), _task(1), 2) for k in range(2)))  # scored
    half = asyncio.ensure_future(actor.submit(_episode(2, 0, right=False), _task(2), 2))  # its mate died
    await asyncio.sleep(0.05)
    assert await actor.forget(["u1", "u2"]) == {"pending": 1, "scored": 1}
    await asyncio.sleep(0)
    assert half.cancelled()  # its waiter was in the dead worker: nobody is left waiting on the barrier
    for i in (1, 2):  # the replay, complete
        await asyncio.gather(*(actor.submit(_episode(i, k, right=i == 1), _task(i), 2) for k in range(2)))
    report = await actor.step_report()
    assert (report["episodes"], report["groups_scored"], report["pending_groups"]) == (4, 2, 0)
    assert report["accuracy"] == 0.5 and report["tool_counts"] == {"search": 4}
    assert actor.totals()["episodes"] == 4


async def test_missing_member_deadline_fires_then_late_arrival():
    actor = RewardActor(group_deadline_s=0.3, failure_reward=-1.0)
    start = time.monotonic()
    got = await asyncio.wait_for(asyncio.gather(actor.submit(_episode(2, 0, True), _task(2), 3),
                                                actor.submit(_episode(2, 1, False), _task(2), 3)), timeout=5)
    assert 0.25 <= time.monotonic() - start < 3
    assert [g["reward"] for g in got] == pytest.approx([1.0, 0.0]) and got[0]["advantage"] > 0
    assert all(g["by_deadline"] for g in got)  # the verl agent loop reports these as reward_extra_info
    late = await asyncio.wait_for(actor.submit(_episode(2, 2, True), _task(2), 3), timeout=1)
    assert late["status"] == "late" and late["reward"] == -1.0 and late["advantage"] == 0.0
    report = await actor.step_report()
    assert (report["deadline_fires"], report["missing"], report["late"], report["groups_scored"]) == (1, 1, 1, 1)
    # the uid is free again: a fresh, complete group with it is scored normally
    again = await asyncio.gather(*(actor.submit(_episode(2, k, k == 0), _task(2), 2) for k in range(2)))
    assert [g["status"] for g in again] == ["scored", "scored"] and not any(g["by_deadline"] for g in again)


async def test_errored_member_gets_failure_reward_and_scoring_failure_answers_all():
    actor = RewardActor(group_deadline_s=30, failure_reward=-0.5)
    got = await asyncio.gather(actor.submit(_episode(3, 0, True), _task(3), 2),
                               actor.submit(_episode(3, 1, True, termination="error"), _task(3), 2))
    # the errored member is left out of the rubric's statistics, so the lone live member's features are all
    # constant (R = 0), but it still beats the failure reward in the advantage baseline
    assert got[1]["status"] == "error" and got[1]["reward"] == -0.5 and got[0]["reward"] == 0.0
    assert got[0]["advantage"] > 0 > got[1]["advantage"]
    assert (await actor.step_report())["errors"] == 1
    with pytest.raises(ValueError, match="group_size"):
        await actor.submit(_episode(3, 0, True), _task(3), 0)
    bad_pref = {**_task(4), "pref": {}}
    actor.score_kw["cost_scale"] = -1  # force the scalar rubric to fail inside scoring
    actor.score_kw["rubric"] = "scalar"
    got = await asyncio.wait_for(asyncio.gather(*(actor.submit(_episode(4, k, True), bad_pref, 2)
                                                  for k in range(2))), timeout=5)
    assert all(g["status"] == "error" and "cost_scale" in g["judgement"]["reason"] for g in got)


async def test_100_groups_interleaved_from_concurrent_producers():
    actor = RewardActor(group_deadline_s=60)
    G, groups = 4, 100
    episodes = [(i, k) for i in range(groups) for k in range(G)]
    random.Random(0).shuffle(episodes)
    rng = random.Random(1)

    async def producer(share):
        async def one(i, k):
            await asyncio.sleep(rng.random() * 0.02)
            return await actor.submit(_episode(i, k, right=(i + k) % 3 == 0, usd=0.001 * (k + 1)), _task(i), G)
        return await asyncio.gather(*(one(i, k) for i, k in share))

    results = await asyncio.wait_for(asyncio.gather(*(producer(episodes[p::8]) for p in range(8))), timeout=60)
    flat = [r for share in results for r in share]
    assert sorted(r["traj_id"] for r in flat) == sorted(f"u{i}-{k}" for i, k in episodes)
    by_uid: dict[str, list[dict]] = {}
    for r in flat:
        assert r["traj_id"].startswith(r["uid"] + "-") and r["status"] == "scored"
        by_uid.setdefault(r["uid"], []).append(r)
    assert len(by_uid) == groups
    for members in by_uid.values():
        assert len(members) == G
        assert sum(m["advantage"] for m in members) == pytest.approx(0.0, abs=1e-6)
        for m in members:  # each caller got its own episode's verdict, and wrong answers earn 0
            i, k = (int(x) for x in m["traj_id"][1:].split("-"))
            assert m["correct"] == ((i + k) % 3 == 0)
            assert m["correct"] or m["reward"] == 0.0
    report = await actor.step_report()
    assert report["groups_scored"] == groups and report["deadline_fires"] == 0 and report["episodes"] == 400
    expected_acc = sum((i + k) % 3 == 0 for i, k in episodes) / 400
    assert report["accuracy"] == pytest.approx(expected_acc)


async def test_state_round_trip():
    actor = RewardActor(group_deadline_s=30)
    await asyncio.gather(*(actor.submit(_episode(5, k, k == 0), _task(5), 2) for k in range(2)))
    state = actor.state()
    fresh = RewardActor()
    fresh.load_state(state)
    assert fresh.totals() == actor.totals() and fresh.totals()["episodes"] == 2
    assert (await fresh.step_report())["accuracy"] == 0.5


def test_config_errors():
    with pytest.raises(ValueError, match="rubric"):
        RewardActor(rubric="nope")
    with pytest.raises(ValueError, match="judge_base_url"):
        RewardActor(judges={"default": "llm"})


def test_through_ray(ray_cluster):
    ray = ray_cluster
    actor = remote_reward_actor(num_cpus=0, group_deadline_s=1.0)
    refs = [actor.submit.remote(_episode(i, k, k == 0, usd=0.01 * (k + 1)), _task(i), 3)
            for k in range(3) for i in range(5)]
    refs.append(actor.submit.remote(_episode(9, 0, True), _task(9), 3))  # its group never fills
    got = ray.get(refs, timeout=60)
    assert len(got) == 16 and all(g["status"] == "scored" for g in got)
    assert [g["reward"] for g in got[:5]] == pytest.approx([2.0] * 5)  # right and cheapest in its group
    report = ray.get(actor.step_report.remote())
    assert report["groups_scored"] == 6 and report["deadline_fires"] == 1 and report["missing"] == 2
    ray.kill(actor)


def test_config_kwargs_carry_every_reward_setting():
    """The launcher and from_config share one mapping, so no backend can drop a reward setting (the local
    backend once ignored reward.unanswered_penalty): the settings reach the scoring arguments."""
    import inspect

    from cluster.launch import judge_expert
    from orchestra.config import load_config

    cfg = load_config(["experiment=cpu_smollm2", "reward.unanswered_penalty=0.25", "reward.failure_reward=-0.5"])
    kw = RewardActor.config_kwargs(cfg.reward, cfg.model, judge_expert(cfg))
    assert set(kw) <= set(inspect.signature(RewardActor.__init__).parameters)
    assert {"unanswered_penalty", "failure_reward", "cost_scale", "latency_scale", "rubric"} <= set(kw)
    score_kw = RewardActor(**kw).score_kw
    assert (score_kw["unanswered_penalty"], score_kw["failure_reward"]) == (0.25, -0.5)
    assert score_kw["price_in"] == cfg.model.price_in_per_mtok
