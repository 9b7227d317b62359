"""The verl job's own actors (issue 47). It waits for what it starts: a warm-start learner or reward actor that Ray
cannot place (no node has the GPUs it asks for: `ray up`'s GPU workers never launched) becomes an error naming the
wait and the free resources within cluster.start_timeout_s, instead of a job that waits forever (F1). The code
sandbox is checked where the code tools run, by their own servers, and they are placed by cluster.tool_resources
(F11)."""

from __future__ import annotations

import pytest
from rich.console import Console

from orchestra.config import ConfigError, load_config

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
    from cluster import launch
    from cluster.verl import job as verl_job

    monkeypatch.setattr(launch, "start_tool_servers", lambda cfg, corpus=None: {})
    # a reward actor that cannot be placed here, as one on a cluster whose CPUs are all taken
    monkeypatch.setattr(launch, "start_reward_actor",
                        lambda cfg: ray.remote(RewardActor).options(num_gpus=1, max_concurrency=10).remote())
    cfg = load_config(NO_GPU + ["reward=toolorchestra"])
    with pytest.raises(RuntimeError, match="the reward actor did not start within cluster.start_timeout_s=3s"):
        verl_job.start_job_actors(cfg)


@pytest.mark.timeout(120, method="thread")
def test_the_sandbox_preflight_runs_in_the_code_tools_server(ray_cluster, monkeypatch, tmp_path):
    """A tool server whose node cannot run the sandbox (here: a PATH without bubblewrap and unshare, as on a node
    that lacks them) stops the job before training, naming the tool and its host. On 64e2e69 the preflight probed
    the driver's host only, and this driver's host is fine."""
    import os
    import shutil

    import ray

    bare = tmp_path / "bin"  # every program of the PATH but the two the sandbox needs
    bare.mkdir()
    for d in os.environ["PATH"].split(os.pathsep):
        for p in (os.scandir(d) if os.path.isdir(d) else []):
            if p.name not in ("bwrap", "unshare") and not (bare / p.name).exists():
                (bare / p.name).symlink_to(p.path)
    assert shutil.which("python3", path=str(bare)) and not shutil.which("bwrap", path=str(bare))

    from actors.tool_server import ToolServer
    from cluster import launch
    from cluster.verl import job as verl_job
    from tools.registry import zoo_dict

    cfg = load_config(["experiment=verl_cpu_tiny", "zoo.tools=[search,python,answer]", "cluster.start_timeout_s=60"])
    assert launch.sandbox_preflight(cfg) is None  # the driver's host passes
    broken = ray.remote(ToolServer).options(runtime_env={"env_vars": {"PATH": str(bare)}})
    python = broken.remote(zoo_dict(cfg.zoo), "python")
    monkeypatch.setattr(launch, "start_tool_servers", lambda cfg, corpus=None: {"python": python})
    with pytest.raises(ConfigError, match=r"the code sandbox of tool server 'python' on \S+ would refuse"):
        verl_job.start_job_actors(cfg)


def test_tool_servers_ask_for_the_configured_resources(ray_cluster):
    """cluster.tool_resources pins the job's tool servers to the nodes that offer them (the KubeRay `tools` pods);
    none offers them here, so they are never placed: the wait says why."""
    from cluster import launch

    cfg = load_config(["experiment=verl_cpu_tiny", "zoo.tools=[answer]", "cluster.start_timeout_s=3",
                       "cluster.tool_resources={orchestra_tools: 0.001}"])
    with pytest.raises(RuntimeError, match="cluster.tool_resources=.*orchestra_tools.*a node must offer them"):
        launch.start_tool_servers(cfg)
