"""A cluster of several Ray nodes on one machine (cluster/nodes.py, `make cluster-up`): its plan (loopback IPs of
its own, ports that never collide), its processes ended by session id and nothing else, its token. Starting real
nodes and losing one: tests/bench/test_nodes.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cluster import nodes


def test_the_plan_gives_each_node_an_address_and_ports_of_its_own(tmp_path):
    c = nodes.plan(tmp_path, workers=3, head_ip="127.0.0.41", gcs_port=6700, dashboard_port=8700)
    assert [n.ip for n in c.nodes] == ["127.0.0.41", "127.0.0.42", "127.0.0.43", "127.0.0.44"]
    assert [n.name for n in c.nodes] == ["head", "worker-1", "worker-2", "worker-3"]
    head, workers = c.nodes[0], c.nodes[1:]
    assert head.num_gpus == 0 and head.resources == {nodes.TOOLS_RESOURCE: 1.0}
    assert all(w.num_gpus == 1 and w.resources == {nodes.WORKERS_RESOURCE: 1.0} for w in workers)
    ports = [p for n in c.nodes for k, p in n.ports.items() if k not in ("min_worker", "max_worker")]
    ranges = [range(n.ports["min_worker"], n.ports["max_worker"] + 1) for n in c.nodes]
    assert len(set(ports + [6700, 8700])) == len(ports) + 2
    assert not any(p in r for p in ports for r in ranges) and sum(len(r) for r in ranges) == len(set().union(*ranges))
    assert c.gcs_address == "127.0.0.41:6700" and c.dashboard_url == "http://127.0.0.41:8700"
    # a temp dir per node, as a disk per machine: a worker node's runtime-env agent re-extracts a job's working dir
    # in its own; in one shared with the head it deleted the submitted driver's cwd under it
    assert len({n.temp_dir for n in c.nodes}) == 4 and all(n.temp_dir.startswith("/tmp/orchestra-ray-6700") for n in c.nodes)
    args = nodes.start_args(c, head)
    assert args[args.index("--dashboard-host") + 1] == "127.0.0.41" and "--head" in args
    assert nodes.start_args(c, workers[0])[-2:] == ["--address", "127.0.0.41:6700"]
    with pytest.raises(SystemExit, match="127.0.0.0/8"):
        nodes.plan(tmp_path, head_ip="10.0.0.1")


def test_down_ends_exactly_the_processes_of_the_clusters_sessions(tmp_path):
    """A node's processes share the session `ray start` was given (setsid); the cluster's workers, agents and client
    server included. A process outside those sessions (another cluster, the user's shell) is never touched."""
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "time.sleep(60)"
    ours = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)  # a node: leader and a child
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while len(nodes.session_processes({ours.pid})) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        found = nodes.session_processes({ours.pid})
        assert len(found) == 2 and all(os.getsid(p.pid) == ours.pid for p in found)
        assert nodes.end_processes({ours.pid}, hard=False) == 2
        assert nodes.session_processes({ours.pid}) == [] and ours.wait(timeout=10) is not None
        assert other.poll() is None  # not one of the cluster's
    finally:
        for p in (ours, other):
            if p.poll() is None:
                p.kill()


def test_the_cluster_has_a_token_of_its_own_found_from_its_address(tmp_path, monkeypatch):
    c = nodes.plan(tmp_path / "cl", gcs_port=6710, dashboard_port=8710)
    (tmp_path / "cl").mkdir()
    c.save()
    assert c.env() == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": c.token_path}
    assert nodes.token_for(c.dashboard_url, tmp_path / "cl") == c.token_path
    assert nodes.token_for(c.gcs_address, tmp_path / "cl") == c.token_path
    assert nodes.token_for("http://127.0.0.99:8265", tmp_path / "cl") == ""
    monkeypatch.setenv("ORCHESTRA_CLUSTER_DIR", str(tmp_path / "none"))
    assert nodes.token_for(c.dashboard_url) == ""  # no cluster recorded there


def test_ports_in_use_are_named_before_anything_starts(tmp_path):
    import socket

    c = nodes.plan(tmp_path, head_ip="127.0.0.51", gcs_port=6720, dashboard_port=8720)
    with socket.socket() as s:
        s.bind(("127.0.0.51", 6720))
        s.listen()
        assert nodes.busy_ports(c, c.nodes) == ["head gcs port 127.0.0.51:6720"]
        with pytest.raises(SystemExit, match="ports in use"):
            nodes.up(c)
