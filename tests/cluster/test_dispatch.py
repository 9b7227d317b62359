"""Dispatch (cluster/rollouts.py): results come back in request order whichever worker finishes first, and a
worker that dies mid-call leaves error episodes in its requests' places."""

from __future__ import annotations

import time

import ray
from rich.console import Console

from actors.rollout_worker import EpisodeResult
from cluster.rollouts import Dispatch
from orchestra.types import Trajectory


@ray.remote(max_restarts=0)
class FakeWorker:
    """Answers its shard in order after `delay` seconds (a stand-in for actors/rollout_worker.RolloutWorker)."""

    def __init__(self, delay: float):
        self.delay = delay

    def rollout(self, requests, sampling, score=False):
        time.sleep(self.delay)
        return [EpisodeResult(Trajectory(task_id=r["task"]["id"], uid=r["uid"], answer="done",
                                         termination="answered"), r["task"]["id"], r["uid"]) for r in requests]


def requests(groups: int) -> list[dict]:
    return [{"task": {"id": f"t{g}"}, "uid": f"g{g}", "group_size": 2} for g in range(groups) for _ in range(2)]


def test_results_follow_the_requests_not_the_finishing_order(ray_cluster):
    slow, fast = FakeWorker.remote(1.0), FakeWorker.remote(0.0)  # groups 0, 2 go to the slow one
    reqs = requests(4)
    got = Dispatch([slow, fast], None, 10.0, Console(quiet=True), None).run(reqs, {}, score=False)
    assert [r.uid for r in got] == [r["uid"] for r in reqs] == ["g0", "g0", "g1", "g1", "g2", "g2", "g3", "g3"]
    assert all(r.traj.termination == "answered" for r in got)


def test_a_dead_worker_leaves_errors_in_its_requests_places(ray_cluster):
    doomed, fast = FakeWorker.remote(30.0), FakeWorker.remote(0.0)
    ray.get([doomed.__ray_ready__.remote(), fast.__ray_ready__.remote()])
    reqs = requests(2)
    dispatch = Dispatch([doomed, fast], None, 10.0, Console(quiet=True), None)
    ray.kill(doomed)
    got = dispatch.run(reqs, {}, score=False)
    assert [r.uid for r in got] == ["g0", "g0", "g1", "g1"]
    assert [r.traj.termination for r in got] == ["error", "error", "answered", "answered"]
    assert "rollout worker died" in got[0].traj.error
