"""A verl job on a cluster of several nodes (issue 68): it joins the cluster it runs in, ends within seconds of a
lost node naming it and the checkpoint to resume from (cluster/verl/wait.py node_watch), says where its ranks and
tool servers ran (cluster/verl/placement.py), and a submission to a cluster on this machine fills in what its nodes
share with the submitter (cluster/verl/job.py this_machine). The real cluster: tests/bench/test_nodes.py."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace

import pytest

from cluster.verl import job as verl_job
from cluster.verl import placement
from cluster.verl import submit as verl_submit
from cluster.verl import wait as verl_wait
from orchestra.config import ConfigError, load_config

TWO = ["experiment=verl_cpu_2node"]


def node(nid: str, ip: str, port: int, alive: bool = True, **resources: float) -> dict:
    return {"NodeID": nid, "NodeManagerAddress": ip, "NodeManagerPort": port, "Alive": alive, "Resources": resources}


def closed_port() -> int:
    """A loopback port nobody listens on: a lost node's raylet."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listening():
    """A loopback port that answers: a live node's raylet."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_the_job_watches_the_nodes_it_runs_on(tmp_path):
    cfg = load_config([*TWO, f"verl.output_dir={tmp_path}"])
    seen = [node("head", "127.0.0.11", 1, orchestra_tools=1.0), node("w1", "127.0.0.12", 2, GPU=1.0),
            node("w2", "127.0.0.13", 3, GPU=1.0), node("idle", "127.0.0.14", 4, CPU=8.0),
            node("old", "127.0.0.13", 5, alive=False, GPU=1.0)]
    assert verl_wait.job_nodes(cfg, seen) == {"head": ("127.0.0.11", 1), "w1": ("127.0.0.12", 2),
                                              "w2": ("127.0.0.13", 3)}


def test_a_node_lost_while_the_job_blocks_ends_it_naming_the_node_and_checkpoint(tmp_path, capsys):
    cfg = load_config([*TWO, f"verl.output_dir={tmp_path}"])
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")
    states = [[node("w1", "127.0.0.12", 0, GPU=1.0), node("w2", "127.0.0.13", 0, GPU=1.0)]]
    exits = []
    with verl_wait.node_watch(cfg, "verl job t", nodes=lambda: states[-1], poll_s=0.05, exit=exits.append):
        states.append([node("w1", "127.0.0.12", 0, GPU=1.0), node("w2", "127.0.0.13", 0, alive=False, GPU=1.0)])
        deadline = time.monotonic() + 10
        while not exits and time.monotonic() < deadline:  # the main thread blocked in a collective
            time.sleep(0.05)
    assert exits == [verl_wait.NODE_LOST_EXIT]
    err = capsys.readouterr().err
    assert "node 127.0.0.13 (w2) was lost" in err
    assert f"Newest checkpoint: {tmp_path}/checkpoints/global_step_2 (a resubmission resumes at step 3)" in err


def test_an_error_from_a_lost_peer_waits_for_ray_to_mark_its_node_then_says_so(tmp_path, capsys, listening):
    """On 18a2f95 rank 0's gloo all-reduce failed ("Connection closed by peer") 7 s after rank 1's node was killed,
    before Ray's health checks marked the node dead: the job ended FAILED with a gloo traceback naming no node."""
    cfg = load_config([*TWO, f"verl.output_dir={tmp_path}"])
    dead_port = closed_port()
    marked = {"t": time.monotonic() + 0.5}  # Ray marks it dead half a second later

    def nodes():
        return [node("w1", "127.0.0.12", listening, GPU=1.0),
                node("w2", "127.0.0.1", dead_port, alive=time.monotonic() < marked["t"], GPU=1.0)]

    exits = []
    with verl_wait.node_watch(cfg, "verl job t", nodes=nodes, poll_s=0.05, grace_s=10, exit=exits.append):
        raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer")
    assert exits == [verl_wait.NODE_LOST_EXIT]
    err = capsys.readouterr().err
    assert err.index("Connection closed by peer") < err.index("was lost")  # the cause is the last line


def test_an_error_with_every_node_alive_goes_on_at_once(tmp_path, listening):
    cfg = load_config([*TWO, f"verl.output_dir={tmp_path}"])
    start = time.monotonic()
    with pytest.raises(ValueError, match="a config error"):
        with verl_wait.node_watch(cfg, "verl job t", nodes=lambda: [node("w1", "127.0.0.1", listening, GPU=1.0)],
                                  poll_s=0.05, grace_s=30, exit=lambda code: pytest.fail("exited")):
            raise ValueError("a config error")
    assert time.monotonic() - start < 5  # no grace wait: every raylet answered


def test_placement_names_the_nodes_of_verls_ranks_and_of_the_tool_servers():
    cfg = load_config(TWO)
    actors = [SimpleNamespace(name="abcWorkerDict_0:0", class_name="WorkerDict", node_id="n12"),
              SimpleNamespace(name="abcWorkerDict_1:0", class_name="WorkerDict", node_id="n13"),
              SimpleNamespace(name="tool:answer", class_name="ToolServer", node_id="n11"),
              SimpleNamespace(name="", class_name="TaskRunnerV1", node_id="n12")]
    where = placement.placement(actors, {"n11": "127.0.0.11", "n12": "127.0.0.12", "n13": "127.0.0.13"}, per_node=1)
    lines = placement.lines(cfg, where, {"127.0.0.11": {"orchestra_tools", "CPU"}, "127.0.0.12": {"GPU"}})
    assert lines[0] == "placement: verl's ranks on 2 node(s): 127.0.0.12: rank 0; 127.0.0.13: rank 1"
    assert lines[1] == "placement: tool servers on 127.0.0.11 (every one on a node offering ['orchestra_tools'])"
    assert lines[2] == "placement: verl's other actors on 127.0.0.12: TaskRunnerV1"
    lines = placement.lines(cfg, where, {"127.0.0.11": {"CPU"}})
    assert "NOT all on a node offering" in lines[1]


def test_the_job_joins_the_cluster_it_runs_in(monkeypatch):
    """On bd00958 the CPU platform's driver called ray.init(address="local") under `ray job submit` and started a
    cluster of its own inside the job (it timed out, or stayed RUNNING)."""
    cfg = load_config(TWO)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.11:6390")  # what Ray gives a submitted job's driver
    assert verl_job.cluster_address(cfg) == "127.0.0.11:6390"
    assert verl_job.cluster_address(load_config([*TWO, "cluster.address=10.0.0.1:6379"])) == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.11:8290")
    with pytest.raises(ConfigError, match="dashboard"):
        verl_job.cluster_address(cfg)
    monkeypatch.delenv("RAY_ADDRESS")
    assert verl_job.cluster_address(cfg) == ""  # --here on one machine: a cluster of its own


def test_a_cluster_on_this_machine_gets_this_checkout_and_interpreter(monkeypatch, tmp_path, capsys):
    from cluster import nodes

    c = nodes.plan(tmp_path / "cl")
    (tmp_path / "cl").mkdir()
    c.save()
    monkeypatch.setenv("ORCHESTRA_CLUSTER_DIR", str(tmp_path / "cl"))
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    cfg = load_config(TWO)
    extra, token = verl_submit.this_machine(cfg, c.dashboard_url)
    assert extra[0].startswith("verl.output_dir=/") and extra[0].endswith("runs/verl_cpu_2node")
    assert extra[1].startswith("verl.python=") and token == {"RAY_AUTH_TOKEN_PATH": c.token_path}
    assert "a cluster on this machine" in capsys.readouterr().err
    assert verl_submit.this_machine(cfg, "http://10.0.0.5:8265") == ([], {})  # elsewhere nothing is guessed
    assert verl_submit.this_machine(load_config(TWO + ["verl.output_dir=/mnt/x", "verl.python=/p"]),
                                 "http://127.0.0.99:8265") == ([], {})


def test_a_driver_under_ray_job_submit_names_no_env_var_its_job_names(monkeypatch):
    """On 18a2f95 `cluster.train` submitted as a job failed at ray.init: Ray refuses a driver runtime_env that names
    an env var the job's runtime_env names (cluster/runtime_env.yaml sets TOKENIZERS_PARALLELISM too)."""
    import json

    from cluster.launch import beside_job

    ours = {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}, "pip": None}
    assert beside_job(ours) == ours  # not in a job: all of it
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps(
        {"runtime_env": {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}}}))
    assert beside_job(ours) == {"env_vars": {"OMP_NUM_THREADS": "1"}, "pip": None}
