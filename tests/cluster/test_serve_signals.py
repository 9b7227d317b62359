"""`python -m cluster.serve` (`make serve`) stops cleanly on SIGINT (Ctrl-C) and on SIGTERM: Serve and the Ray
cluster it started shut down, it exits 0 within a bound, and none of the processes it started is left behind.

The server runs as a real subprocess in a session of its own (so "its processes" are that session's), started as a
non-interactive shell starts a background job (`make serve &`): with SIGINT ignored, which is how SIGINT once did
nothing. The untrained tiny policy and the `answer` tool only keep the start short; one start is ~1 min on 2 cores.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
START_S, STOP_S = 300.0, 60.0  # start: a busy 2-core box; stop: the bound this test is about


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_pids(sid: int) -> list[int]:
    """Live (not zombie) processes of session `sid`, read from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, _ppid, _pgrp, session = stat.rsplit(")", 1)[1].split()[:4]
        if int(session) == sid and state != "Z":
            pids.append(int(entry))
    return pids


def _like_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process table from /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_serve_and_its_ray_cluster(sig, tmp_path):
    port = _free_port()
    env = {**os.environ, "ORCHESTRA_API_KEYS": "sk-test-signals", "RAY_USAGE_STATS_ENABLED": "0",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)  # a cluster of its own, never one a neighbour started
    log = (tmp_path / "serve.log").open("w+")
    cmd = [sys.executable, "-m", "cluster.serve", f"port={port}", "checkpoint=", "num_cpus=0.5", "zoo.tools=[answer]"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_like_a_background_job)
    try:
        deadline = time.monotonic() + START_S
        while True:
            assert proc.poll() is None, f"serve exited early ({proc.returncode}):\n{(tmp_path / 'serve.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, "no /healthz within the start bound"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        started = session_pids(proc.pid)
        assert len(started) >= 3, started  # the driver, Ray's GCS and raylet at least: the check below means something
        t0 = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(timeout=STOP_S)
        took = time.monotonic() - t0
        left = session_pids(proc.pid)
        while left and time.monotonic() - t0 < STOP_S:  # children killed on the way out may take a moment to go
            time.sleep(0.5)
            left = session_pids(proc.pid)
        out = (tmp_path / "serve.log").read_text()
        assert rc == 0, out[-3000:]
        assert took < STOP_S and not left, f"left behind: {left}"
        assert f"{signal.Signals(sig).name}: stopping Serve and Ray" in out
    finally:
        for pid in session_pids(proc.pid):  # a failed run must not leak a cluster into the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.wait(timeout=10)
        log.close()
