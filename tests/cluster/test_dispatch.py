"""Dispatch (cluster/rollouts.py): results come back in request order whichever worker finishes first, and a
worker that dies mid-call (its process, or its node) has its groups forgotten by the reward actor and played again
once it is back with the current weights: no error episodes, nothing counted twice."""

from __future__ import annotations

import time

import pytest
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


@ray.remote(max_restarts=1)
class DyingWorker:
    """Dies (its process exits, as on a lost node) in its first life's rollout; answers after its restart."""

    def __init__(self):
        self.life = ray.get_runtime_context().was_current_actor_reconstructed

    def rollout(self, requests, sampling, score=False):
        if not self.life:
            import os

            os._exit(1)
        return [EpisodeResult(Trajectory(task_id=r["task"]["id"], uid=r["uid"], answer="again",
                                         termination="answered"), r["task"]["id"], r["uid"]) for r in requests]


@ray.remote
class FakeReward:
    def __init__(self):
        self.forgotten = []

    def forget(self, uids):
        self.forgotten.append(list(uids))
        return {"pending": 1, "scored": 0}

    def seen(self):
        return self.forgotten


def test_a_dead_workers_groups_are_forgotten_and_played_again_once_it_is_back(ray_cluster):
    dying, fast, reward = DyingWorker.remote(), FakeWorker.remote(0.0), FakeReward.remote()
    ray.get([dying.__ray_ready__.remote(), fast.__ray_ready__.remote()])
    synced = []

    def resync() -> None:  # as the trainer's sync_weights(only_stale=True): waits for the restarted worker
        deadline = time.monotonic() + 120
        while True:
            try:
                ray.get(dying.__ray_ready__.remote(), timeout=30)
                break
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.RayActorError):
                assert time.monotonic() < deadline, "the dying worker never came back"
                time.sleep(0.2)
        synced.append(1)

    reqs = requests(2)  # g0 -> the dying worker, g1 -> the fast one
    dispatch = Dispatch([dying, fast], reward, 10.0, Console(quiet=True), None, resync=resync)
    got = dispatch.run(reqs, {}, score=True)
    assert [r.uid for r in got] == ["g0", "g0", "g1", "g1"]
    assert [r.traj.answer for r in got] == ["again", "again", "done", "done"]  # played by the restarted worker
    assert ray.get(reward.seen.remote()) == [["g0"]] and synced == [1] and dispatch.replays == 1


def test_a_worker_that_stays_dead_ends_the_call_after_its_replays(ray_cluster):
    doomed, fast = FakeWorker.remote(30.0), FakeWorker.remote(0.0)
    ray.get([doomed.__ray_ready__.remote(), fast.__ray_ready__.remote()])
    dispatch = Dispatch([doomed, fast], None, 10.0, Console(quiet=True), None, max_replays=2)
    ray.kill(doomed)
    with pytest.raises(ray.exceptions.RayActorError):
        dispatch.run(requests(2), {}, score=False)
    assert dispatch.replays == 2  # tried twice more, then the error goes up (the trainer's recovery)
