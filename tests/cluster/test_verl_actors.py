"""The verl job's first stage waits for what it starts: a warm-start learner or reward actor that Ray cannot place
(no node has the GPUs it asks for: `ray up`'s GPU workers never launched) becomes an error naming the wait and the
free resources within cluster.start_timeout_s, instead of a job that waits forever (issue 47, F1)."""

from __future__ import annotations

import pytest
from rich.console import Console

from orchestra.config import load_config

pytest.importorskip("verl")

NO_GPU = ["experiment=verl_cpu_tiny", "cluster.learner_gpus=1", "cluster.start_timeout_s=3"]


@pytest.mark.timeout(90, method="thread")  # a hang (the bug) fails the test instead of stalling the run
def test_warm_start_learner_that_cannot_be_placed_is_an_error(ray_cluster, tmp_path, monkeypatch):
    """The test cluster has no GPU, so a learner asking for one is never placed. On 64e2e69 the warm start went on
    to its first learner call and waited there for ever."""
    from cluster import warm_start

    monkeypatch.setattr(warm_start, "warm_start", lambda *a, **k: {"sft_samples": 0})  # never reached
    with pytest.raises(RuntimeError, match=r"the warm-start learner \(cluster.learner_gpus=1\) did not start within "
                                           r"cluster.start_timeout_s=3s; free resources"):
        warm_start.warm_start_policy(load_config(NO_GPU), {}, [], tmp_path / "policy", Console(quiet=True))
    assert not (tmp_path / "policy").exists()


@pytest.mark.timeout(90, method="thread")  # a hang (the bug) fails the test instead of stalling the run
def test_the_jobs_reward_actor_is_waited_for(ray_cluster, monkeypatch):
    import ray

    from actors.reward_actor import RewardActor
    from cluster import launch, verl_job

    monkeypatch.setattr(launch, "start_tool_servers", lambda cfg: {})
    # a reward actor that cannot be placed here, as one on a cluster whose CPUs are all taken
    monkeypatch.setattr(launch, "start_reward_actor",
                        lambda cfg: ray.remote(RewardActor).options(num_gpus=1, max_concurrency=10).remote())
    cfg = load_config(NO_GPU + ["reward=toolorchestra"])
    with pytest.raises(RuntimeError, match="the reward actor did not start within cluster.start_timeout_s=3s"):
        verl_job.start_job_actors(cfg)
