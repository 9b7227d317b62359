"""actors/rollout_worker.py with zoo.server.client_replay: the policy's episodes on one task under several preferences
(as SFT's check and the evaluations play them) make each tool call once, and their trajectories are the ones every
call made anew gives, $ and seconds included."""

from __future__ import annotations

import asyncio
import dataclasses

from actors.rollout_worker import RolloutWorker
from orchestra.config import load_config
from orchestra.data.synth.template import generate_tasks
from orchestra.preferences import preset

PLAN = ["enhance_reasoning:reasoner-3", "answer:answer-2"]  # a program written and run in the sandbox, then an answer


def _worker(replay: int) -> RolloutWorker:
    zoo = dataclasses.replace(load_config().zoo, tools=["enhance_reasoning", "answer"])
    return RolloutWorker(worker_id=0, model_name="tiny", model_kwargs={},
                         engine_kind="orchestra.agent.scripted:plan_engine", engine_kwargs={"plan": PLAN},
                         agent_kwargs={"max_turns": 3}, prompter_kwargs={}, zoo=dataclasses.asdict(zoo),
                         tool_replay=replay)


def _play(worker: RolloutWorker) -> list[tuple]:
    zoo = load_config().zoo
    tasks = generate_tasks(12, 3, split="train", mapping=zoo.tiers).tasks[:4]
    reqs = [{"task": {**t.to_dict(), "pref": preset(p)}, "uid": f"{p}-{t.id}", "group_size": 1, "seed": 11}
            for p in ("accuracy-first", "balanced", "cost-first") for t in tasks]
    out = asyncio.run(worker.rollout(reqs, {"max_tokens": 64, "temperature": 0.0}, score=False))
    return [(r.uid, r.traj.termination, r.traj.answer, r.traj.cost_usd, r.traj.latency_s,
             r.traj.tool_counts) for r in out]


def test_replayed_tool_calls_give_the_trajectories_fresh_calls_give_with_each_call_made_once():
    fresh, replaying = _worker(0), _worker(100)
    plays = _play(replaying)
    assert plays == _play(fresh)
    assert all(p[1] == "answered" and p[4] > 0 for p in plays)
    stats = replaying.stats()
    # 4 tasks x 3 presets x 2 calls asked; each task's 2 calls made once (one context per task and call)
    assert (stats["tool_calls_asked"], stats["tool_calls_made"]) == (24, 8)
    assert "tool_calls_asked" not in fresh.stats()
