"""Starting and stopping the nodes of a Ray cluster on one machine (cluster/nodes/): `up` (each node's `ray start` in
a session of its own), `down` (every process of the recorded sessions and their descendants, by id: never Ray's own
stop command, which ends every Ray cluster on the machine), `lose` (a hard loss: SIGKILL to one worker node's
processes, as a preempted machine) and `start_node` (a node back under its IP and ports), and what the GCS sees
(`alive_nodes`, `wait_alive`), read through the dashboard's state API with the cluster's token.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from cluster.nodes.layout import SERVE_KEYS_ENV, LocalCluster, Node, load, node_env, start_args

STOP_GRACE_S = 10.0


def busy_ports(c: LocalCluster, nodes: list[Node]) -> list[str]:
    """Ports some other process holds on a node's address: said before starting instead of a Ray error later."""
    out = []
    for n in nodes:
        wanted = [k for k in n.ports if k not in ("min_worker", "max_worker")]
        checks = [(k, n.ports[k]) for k in wanted if n.head or k != "client_server"]
        if n.head:
            checks += [("gcs", c.gcs_port), ("dashboard", c.dashboard_port)]
        for what, port in checks:
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((n.ip, port))
                except OSError:
                    out.append(f"{n.name} {what} port {n.ip}:{port}")
    return out


def start_node(c: LocalCluster, n: Node) -> None:
    """`ray start` for one node in a session of its own; its session id recorded in <dir>/cluster.json."""
    log = Path(c.dir) / f"{n.name}.log"
    with log.open("a") as f:
        proc = subprocess.Popen(start_args(c, n), stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=node_env(c), start_new_session=True, cwd=c.dir)
        n.session = proc.pid  # the session leader's pid is the session id every process of the node carries
        c.save()
        rc = proc.wait(timeout=180)
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise SystemExit(f"ray start of {n.name} ({n.ip}) failed (exit {rc}); {log}:\n" + "\n".join(tail))


def alive_nodes(c: LocalCluster) -> dict[str, bool]:
    """{node IP: alive} as the cluster's GCS sees it, through the dashboard's state API with this cluster's token (no
    driver is started; a node brought back under its IP is alive though its old entry stays DEAD)."""
    import httpx

    token = Path(c.token_path).read_text().strip()
    r = httpx.get(f"{c.dashboard_url}/api/v0/nodes", params={"limit": 1000}, timeout=10,
                  headers={"Authorization": f"Bearer {token}"})
    r.raise_for_status()
    out: dict[str, bool] = {}
    for n in r.json()["data"]["result"]["result"]:
        out[n["node_ip"]] = out.get(n["node_ip"], False) or n["state"] == "ALIVE"
    return out


def wait_alive(c: LocalCluster, ips: set[str], alive: bool = True, timeout: float = 120.0) -> float:
    """Seconds until every node of `ips` is seen alive (or dead); SystemExit naming the rest after `timeout`."""
    start = time.monotonic()
    while True:
        try:
            seen = alive_nodes(c)
        except Exception:  # the dashboard starts a few seconds after the GCS
            seen = {}
        rest = {ip for ip in ips if seen.get(ip, False) != alive}
        if not rest:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise SystemExit(f"nodes {sorted(rest)} not {'alive' if alive else 'dead'} after {timeout:g} s")
        time.sleep(1.0)


def session_processes(sessions: set[int]) -> list[Any]:
    """Every process of these sessions and every descendant of one (a process that left the session too)."""
    import psutil

    found: dict[int, Any] = {}
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) in sessions:
                found[p.pid] = p
                for child in p.children(recursive=True):
                    found[child.pid] = child
        except (ProcessLookupError, psutil.Error):
            continue
    return [p for pid, p in found.items() if pid != os.getpid()]


def end_processes(sessions: set[int], hard: bool) -> int:
    """SIGKILL (hard) or SIGTERM then, after STOP_GRACE_S, SIGKILL for what is left. Returns how many there were."""
    import psutil

    procs = session_processes(sessions)
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(procs, timeout=STOP_GRACE_S)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=5)
    return len(procs)


def up(c: LocalCluster) -> LocalCluster:
    Path(c.dir).mkdir(parents=True, exist_ok=True)
    if (Path(c.dir) / "cluster.json").is_file() and any(n.session for n in load(Path(c.dir)).nodes):
        raise SystemExit(f"a cluster is already recorded in {c.dir}: make cluster-down first")
    busy = busy_ports(c, c.nodes)
    if busy:
        raise SystemExit("ports in use (another cluster, or pick --gcs-port / --head-ip): " + "; ".join(busy))
    for path, text in ((c.token_path, secrets.token_hex(32)), (c.serve_key_path, secrets.token_urlsafe(32))):
        if path == c.serve_key_path and os.environ.get(SERVE_KEYS_ENV):
            continue  # the user's own keys reach the nodes through the environment
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never readable by others, not even briefly
        with os.fdopen(fd, "w") as f:
            f.write(text)
    c.save()
    for n in c.nodes:
        start_node(c, n)
    wait_alive(c, {n.ip for n in c.nodes})
    return c


def down(c: LocalCluster) -> int:
    """Ends every process of every node; returns how many."""
    count = end_processes({n.session for n in c.nodes if n.session}, hard=False)
    for n in c.nodes:
        n.session = 0
    c.save()

    for n in c.nodes:
        shutil.rmtree(n.temp_dir, ignore_errors=True)
    return count


def lose(c: LocalCluster, name: str, wait: bool = True) -> dict[str, Any]:
    """A hard loss of one worker node: SIGKILL to every process of its session (raylet, agents, workers), as a
    preempted machine. With `wait`, the seconds until the GCS marks it dead."""
    n = c.node(name)
    if n.head:
        raise SystemExit("lose: the head holds the GCS; losing it ends the cluster (make cluster-down)")
    if not n.session:
        raise SystemExit(f"lose: {name} is not running")
    killed = end_processes({n.session}, hard=True)
    n.session = 0
    c.save()
    detect = wait_alive(c, {n.ip}, alive=False) if wait else float("nan")
    return {"node": name, "ip": n.ip, "processes": killed, "detect_s": detect}
