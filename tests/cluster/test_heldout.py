"""Held-out evaluation under several presets (cluster/heldout.py): one request per (preset, seed, task) with the
same sampling seed across presets, each episode scored under its own preset, per-preset summaries whose mean is
the score, and the spread / monotone figures."""

from __future__ import annotations

from actors.rollout_worker import EpisodeResult
from cluster import heldout
from orchestra.config import load_config
from orchestra.preferences import COST_ORDER, preset
from orchestra.types import Task, ToolCall, ToolRecord, ToolResult, Trajectory, Turn


def _task(i: int) -> Task:
    return Task(id=f"t{i}", problem=f"{i}+{i}?", answer=str(2 * i), data_source="synthetic/arith",
                meta={"family": "arith"}, pref=preset("balanced"))


def _played(uid: str, task: Task, cost: float, right: bool) -> EpisodeResult:
    answer = task.answer if right else "wrong"
    call = ToolCall("answer", {"model": "answer-1"})
    turn = Turn(prompt_ids=[1], response_ids=[2], logprobs=[0.0], tool_calls=[call], format_ok=True)
    record = ToolRecord(turn=0, name="answer", tool_id="answer-1", arguments={"model": "answer-1"},
                        result=ToolResult(text=answer, cost_usd=cost, latency_s=1.0, answer=answer))
    traj = Trajectory(task_id=task.id, uid=uid, episode_id=uid, turns=[turn], termination="answered",
                      answer=answer, tool_counts={"answer-1": 1}, tool_records=[record], cost_usd=cost)
    return EpisodeResult(traj, task.id, uid)


def test_requests_cover_every_preset_with_common_random_numbers():
    tasks = [_task(i) for i in range(3)]
    reqs = heldout.requests(tasks, seed=0, seeds=2, tag="sft", prefs=list(COST_ORDER))
    assert len(reqs) == 3 * 2 * 3 and len({r["uid"] for r in reqs}) == len(reqs)
    by = {(r["task"]["id"], r["uid"].split("-t")[0]): r for r in reqs}
    assert by[("t1", "eval-sft-accuracy-first")]["task"]["pref"] == preset("accuracy-first")
    seeds = {r["task"]["id"]: set() for r in reqs}
    for r in reqs:
        seeds[r["task"]["id"]].add(r["seed"])
    assert all(len(s) == 2 for s in seeds.values())  # the same two seeds under every preset
    plain = heldout.requests(tasks, seed=0, seeds=1, tag="sft")  # one preset: the old ids, the task's own P
    assert [r["uid"] for r in plain] == ["eval-sft-t0-0", "eval-sft-t1-0", "eval-sft-t2-0"]
    assert plain[0]["task"]["pref"] == preset("balanced")


def test_summary_per_preset_its_mean_and_the_adherence_figures():
    cfg = load_config(["eval.presets=[accuracy-first,balanced,cost-first]"])
    tasks = [_task(i) for i in range(2)]
    reqs = heldout.requests(tasks, seed=0, seeds=1, tag="final", prefs=heldout.presets(cfg))
    spend = {"accuracy-first": 0.004, "balanced": 0.002, "cost-first": 0.001}  # $ falls as the weight rises
    results = []
    for r in reqs:
        name = next(p for p in COST_ORDER if r["task"]["pref"] == preset(p))
        results.append(_played(r["uid"], Task.from_dict(r["task"]), spend[name], right=r["task"]["id"] == "t0"))
    scored = heldout.score(results, reqs, cfg)
    out = heldout.summary(results, scored, tasks, reqs, heldout.presets(cfg))
    assert set(out["by_pref"]) == set(COST_ORDER) and out["episodes"] == 6
    for name in COST_ORDER:
        assert abs(out["by_pref"][name]["cost_usd"] - spend[name]) < 1e-12
        assert out["by_pref"][name]["accuracy"] == 0.5
    assert abs(out["score"] - sum(v["score"] for v in out["by_pref"].values()) / 3) < 1e-12
    # each episode was scored under its own preset: the same $ costs cost-first more than accuracy-first
    assert out["by_pref"]["accuracy-first"]["score"] > out["by_pref"]["cost-first"]["score"]
    assert out["monotone"] == 1.0 and abs(out["pref_spread"] - 4.0) < 1e-9
    flat = heldout.adherence({p: {"cost_usd": 0.002} for p in COST_ORDER})
    assert flat == {"pref_spread": 1.0, "monotone": 0.0}
    assert heldout.adherence({"balanced": {"cost_usd": 0.002}}) == {}


def test_paired_gain_pairs_preset_and_task_and_averages_the_seeds():
    def rows(values: dict[tuple[str, str], list[float]]) -> dict:
        return {"rewards": [{"pref": p, "task": t, "reward": r} for (p, t), rs in values.items() for r in rs]}

    # task a gains 0.2 under both presets, task b 0.0 and 0.4 (b's two seeds under cost-first: 0.5 and 0.7)
    after = rows({("acc", "a"): [1.0], ("cost", "a"): [0.4], ("acc", "b"): [0.5], ("cost", "b"): [0.5, 0.7]})
    before = rows({("acc", "a"): [0.8], ("cost", "a"): [0.2], ("acc", "b"): [0.5], ("cost", "b"): [0.2],
                   ("acc", "c"): [0.9]})  # c was not evaluated after: left out, not paired with nothing
    gain = heldout.paired_gain(after, before)
    assert abs(gain["diff"] - (0.2 + 0.2 + 0.0 + 0.4) / 4) < 1e-12  # = the mean of the per-preset mean gains
    assert gain["tasks"] == 2 and gain["presets"] == 2 and gain["lo"] <= gain["diff"] <= gain["hi"]
    assert heldout.paired_gain(after, {}) == {}


def test_hint_agreement_per_preset_and_the_warning_when_the_policy_ignores_its_hints():
    """Two plans: the router line suggests answer-1 while accuracy counts most and answer-2 (cheap) under
    cost-first. A policy that always calls answer-1 follows it under accuracy-first and balanced only."""
    import numpy as np

    from orchestra.routing.estimator import Expected
    from orchestra.routing.hints import attach
    from orchestra.routing.plans import Plan

    tasks = [_task(i) for i in range(4)]
    plans = [Plan("answer-1", (("answer", "answer-1"),)), Plan("answer-2", (("answer", "answer-2"),))]
    attach(tasks, Expected(np.tile([0.9, 0.5], (4, 1)), np.tile([0.005, 0.0001], (4, 1)), np.ones((4, 2))), plans,
           cost_scale=0.01, latency_scale=10.0)
    prefs = ["accuracy-first", "balanced", "cost-first"]
    reqs = heldout.requests(tasks, seed=0, seeds=1, tag="sft", prefs=prefs)
    results = [_played(r["uid"], Task.from_dict(r["task"]), 0.02, right=True) for r in reqs]
    out = heldout.hint_agreement(results, reqs, prefs)
    assert out["hint_agreement_by_pref"] == {"accuracy-first": 1.0, "balanced": 1.0, "cost-first": 0.0}
    assert abs(out["hint_agreement"] - 2 / 3) < 1e-12
    warning = heldout.hint_warning(out)
    assert "0 % under cost-first" in warning and "accuracy-first" not in warning and "sft.steps" in warning
    assert heldout.hint_warning({"hint_agreement_by_pref": {"balanced": 0.95}}) == ""
    plain = heldout.requests([_task(9)], seed=0, seeds=1, tag="sft", prefs=prefs)  # no router estimates: nothing
    assert heldout.hint_agreement([_played(r["uid"], Task.from_dict(r["task"]), 0.02, True) for r in plain], plain,
                                  prefs) == {}
