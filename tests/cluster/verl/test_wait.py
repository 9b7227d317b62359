"""A verl job waits for the cluster it needs, bounded and out loud, and downloads its policy once (cluster/verl/wait.py;
issue 60, N5): `ray up` returns before the GPU workers are set up, and on f4067d9 the warm start's learner waited for a
GPU and downloaded Qwen3-8B inside one 600 s start timeout."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from cluster.verl import job as verl_job
from cluster.verl import wait as verl_wait
from orchestra.config import load_config

H100 = ["experiment=h100_2x8"]
HEAD = {"Alive": True, "Resources": {"CPU": 32.0, "orchestra_tools": 1000.0}}
GPU_NODE = {"Alive": True, "Resources": {"CPU": 192.0, "GPU": 8.0}}


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_the_job_waits_for_its_gpu_and_tool_nodes_and_says_what_is_missing():
    cfg = load_config(H100)
    clock, lines = Clock(), []
    joined = [[HEAD], [HEAD], [HEAD, GPU_NODE], [HEAD, {"Alive": False, "Resources": GPU_NODE["Resources"]}, GPU_NODE],
              [HEAD, GPU_NODE, GPU_NODE]]
    waited = verl_wait.wait_for_nodes(cfg, nodes=lambda: joined.pop(0) if len(joined) > 1 else joined[0],
                                      clock=clock, sleep=clock.sleep, say=lines.append)
    assert waited == 4 * verl_wait.POLL_S
    assert lines[0].startswith("waiting for the cluster (0 s of verl.join_timeout_s=3600): missing 2 of 2 nodes "
                               "with 8 GPUs") and "0 GPUs joined" in lines[0]
    assert "missing 1 of 2 nodes with 8 GPUs" in lines[1] and "8 GPUs joined" in lines[1]  # a dead node is no node
    assert len(lines) == 3 and lines[-1].startswith("cluster ready after 20 s")  # a line per change, not per poll
    # KubeRay: the GPU pods are up, the tools pod (the only node offering orchestra_tools) is not
    lines.clear()
    with pytest.raises(RuntimeError, match=r"lacks a node offering orchestra_tools .* verl.join_timeout_s=30s"):
        verl_wait.wait_for_nodes(load_config(H100 + ["verl.join_timeout_s=30"]),
                                 nodes=lambda: [{"Alive": True, "Resources": {"CPU": 16.0}}, GPU_NODE, GPU_NODE],
                                 clock=clock, sleep=clock.sleep, say=lines.append)
    assert lines and all("a node offering orchestra_tools" in line for line in lines)
    lines.clear()
    assert verl_wait.wait_for_nodes(cfg, nodes=lambda: [HEAD, GPU_NODE, GPU_NODE], clock=clock, sleep=clock.sleep,
                                    say=lines.append) == 0
    assert lines == []  # all there: no wait, no line


def test_the_wait_comes_before_any_actor_the_job_starts():
    src = inspect.getsource(verl_job.run_here)
    assert src.index("ray.init(") < src.index("wait_for_nodes(cfg)") < src.index("start_job_actors(cfg)")
    assert src.index("wait_for_nodes(cfg)") < src.index("warm_start_stage(")


def test_the_policy_is_downloaded_once_into_the_shared_storage_before_the_job_runs(monkeypatch, tmp_path):
    import huggingface_hub

    calls = []

    def fake_download(repo_id, local_dir, allow_patterns):
        calls.append((repo_id, local_dir, allow_patterns))
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        (Path(local_dir) / "config.json").write_text("{}")
        return local_dir

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    order = []
    monkeypatch.setattr(verl_job, "stage", lambda cfg, over: order.append(("stage", cfg.model.name, list(over))))
    monkeypatch.setattr(verl_job, "run_here", lambda cfg, verl_cfg: order.append(
        ("run", cfg.model.name, verl_cfg.actor_rollout_ref.model.path)))
    over = H100 + [f"verl.output_dir={tmp_path}", "verl.warm_start=false", "sft.teacher=random", "model.lora.r=0"]
    assert verl_job.main(over + ["--here"]) == 0
    local = str(tmp_path / "models" / "Qwen" / "Qwen3-8B")
    assert calls == [("Qwen/Qwen3-8B", local, verl_wait.MODEL_FILES)]
    # the job's other processes rebuild the config from the overrides: they see the shared copy too
    assert order == [("stage", local, over + [f"model.name={local}"]), ("run", local, local)]
    assert verl_job.main(over + ["--here"]) == 0  # a rerun (a resume) downloads nothing
    assert len(calls) == 1
    cfg = load_config(["experiment=verl_cpu_tiny", f"verl.output_dir={tmp_path}"])
    assert verl_wait.fetch_policy(cfg, []) == (cfg, [])  # the embedded policies are built, never downloaded
    with pytest.raises(RuntimeError, match="holds no config.json"):
        monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda **kw: kw["local_dir"])
        verl_wait.fetch_policy(load_config(H100 + [f"verl.output_dir={tmp_path}", "model.name=org/other"]), [])
