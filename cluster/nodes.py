"""A Ray cluster of several nodes on one machine, made the way Ray makes one (`ray start`): the way to try the
cluster path (`ray job submit`, verl across nodes, a lost node, Serve replicas on two nodes, the dashboard) without a
cluster. `make cluster-up` / `make cluster-down`; `python -m cluster.nodes up|down|status|lose NODE|start NODE`.

- A head (GCS, dashboard and job server, the tools resource `orchestra_tools`, no GPUs) and `--workers` worker
  nodes (logical GPUs, as verl's CPU platform counts them, and `orchestra_workers`, where the local backend's
  rollout workers and learner go), each with a node IP of its own in 127.0.0.0/8 and ports of its own. Ray replaces a
  head's `--node-ip-address 127.0.0.1` by the machine's interface address; other loopback addresses are kept, so the
  head is 127.0.0.11 and the workers 127.0.0.12, 127.0.0.13, ... All traffic stays on loopback.
- Token auth on: a token of this cluster's own (`<dir>/auth_token`, mode 0600; RAY_AUTH_TOKEN_PATH names it to every
  node and client), never the user's ~/.ray/auth_token. A temp dir of its own (`/tmp/orchestra-ray-<port>`), so
  nothing of /tmp/ray (another cluster's) is read or replaced.
- Each node is started in a session of its own (`setsid`), and every process Ray starts for it (raylet, GCS,
  dashboard and its modules, agents, client server, workers) inherits that session id. `down` and `lose` end exactly
  the processes of the recorded sessions (and their descendants), by id: never `ray stop`, which ends every Ray
  cluster on the machine. `lose` is a hard loss (SIGKILL: a preempted or crashed machine); `start` brings the node
  back under the same IP and ports.
The state (addresses, sessions, ports) is `<dir>/cluster.json`; `<dir>` is $ORCHESTRA_CLUSTER_DIR, else runs/cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "runs" / "cluster"


def default_dir() -> Path:
    """Where `make cluster-up` records its cluster: $ORCHESTRA_CLUSTER_DIR, else runs/cluster."""
    return Path(os.environ.get("ORCHESTRA_CLUSTER_DIR") or DEFAULT_DIR)
TOOLS_RESOURCE = "orchestra_tools"  # conf: cluster.tool_resources of the cluster presets
WORKERS_RESOURCE = "orchestra_workers"  # conf: cluster.worker_resources of the cluster presets
# ports per node: GCS (head only), node manager, object manager, agent (listen, grpc), runtime-env agent, metrics,
# and a range of worker ports; node i takes base + 20 * i + offset
PORTS = {"node_manager": 1, "object_manager": 2, "agent_listen": 3, "agent_grpc": 4, "runtime_env_agent": 5,
         "metrics_export": 6, "client_server": 7}
WORKER_PORTS = 100  # worker ports per node, from 20000 + 200 * i (on the node's own IP)
STOP_GRACE_S = 10.0
SERVE_KEYS_ENV = "ORCHESTRA_API_KEYS"


@dataclass
class Node:
    name: str
    ip: str
    head: bool
    num_cpus: int
    num_gpus: int
    resources: dict[str, float]
    ports: dict[str, int]
    session: int = 0  # the session id of its processes (0: not running)


@dataclass
class LocalCluster:
    dir: str
    temp_dir: str
    gcs_port: int
    dashboard_port: int
    nodes: list[Node] = field(default_factory=list)
    # the Ray CLI that starts the nodes: its venv's python runs every worker process of the cluster (another venv's,
    # e.g. make verl-vllm-cpu's, runs the whole cluster under that venv's torch)
    ray: str = ""

    @property
    def head(self) -> Node:
        return next(n for n in self.nodes if n.head)

    @property
    def gcs_address(self) -> str:  # ray.init / cluster.address
        return f"{self.head.ip}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:  # RAY_ADDRESS for `ray job submit`, the dashboard in a browser
        return f"http://{self.head.ip}:{self.dashboard_port}"

    @property
    def token_path(self) -> str:
        return str(Path(self.dir) / "auth_token")

    @property
    def serve_key_path(self) -> str:  # the Serve endpoint's API key when $ORCHESTRA_API_KEYS was not set
        return str(Path(self.dir) / "serve_api_key")

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise SystemExit(f"no node {name!r} in {self.dir}: nodes are {[n.name for n in self.nodes]}")

    def env(self) -> dict[str, str]:
        """What a client of this cluster needs: token auth on, this cluster's token."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": self.token_path}

    def save(self) -> None:
        path = Path(self.dir) / "cluster.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(path)


def plan(dir: Path | None = None, workers: int = 2, head_ip: str = "127.0.0.11", gcs_port: int = 6390,
         dashboard_port: int = 8290, head_cpus: int = 8, worker_cpus: int = 8, gpus_per_worker: int = 1,
         python: str = "") -> LocalCluster:
    """The nodes of a cluster: a head and `workers` worker nodes on consecutive loopback addresses."""
    a, b, c, d = (int(x) for x in head_ip.split("."))
    if a != 127 or d + workers > 254:
        raise SystemExit(f"--head-ip: an address in 127.0.0.0/8 with room for {workers} more after it, got {head_ip}")
    nodes = []
    for i in range(workers + 1):
        base = gcs_port + 20 * (i + 1)
        ports = {k: base + off for k, off in PORTS.items()}
        ports.update(min_worker=20000 + 200 * i, max_worker=20000 + 200 * i + WORKER_PORTS - 1)
        nodes.append(Node(name="head" if i == 0 else f"worker-{i}", ip=f"{a}.{b}.{c}.{d + i}", head=i == 0,
                          num_cpus=head_cpus if i == 0 else worker_cpus, num_gpus=0 if i == 0 else gpus_per_worker,
                          resources={TOOLS_RESOURCE: 1.0} if i == 0 else {WORKERS_RESOURCE: 1.0}, ports=ports))
    return LocalCluster(dir=str(Path(dir or default_dir()).resolve()), temp_dir=f"/tmp/orchestra-ray-{gcs_port}", gcs_port=gcs_port,
                        dashboard_port=dashboard_port, nodes=nodes, ray=ray_cli(python))


def load(dir: Path | None = None) -> LocalCluster:
    dir = dir or default_dir()
    path = Path(dir) / "cluster.json"
    if not path.is_file():
        raise SystemExit(f"no cluster recorded in {dir} (make cluster-up starts one)")
    data = json.loads(path.read_text())
    data["nodes"] = [Node(**n) for n in data["nodes"]]
    return LocalCluster(**data)


def token_for(address: str, dir: Path | None = None) -> str:
    """The token path of the cluster recorded in `dir` (default_dir()) when `address` is its dashboard or GCS
    address, else ""."""
    try:
        c = load(dir or default_dir())
    except SystemExit:
        return ""
    return c.token_path if address.rstrip("/") in (c.dashboard_url, c.gcs_address) else ""


def ray_cli(python: str = "") -> str:
    """The `ray` beside `python` (default: this interpreter's venv, the Ray the project pins)."""
    found = Path(python or sys.executable).parent / "ray"
    if python and not found.is_file():
        raise SystemExit(f"--python {python}: no `ray` beside it ({found})")
    return str(found) if found.is_file() else "ray"


def start_args(c: LocalCluster, n: Node) -> list[str]:
    p = n.ports
    args = [c.ray or ray_cli(), "start", "--node-ip-address", n.ip, "--num-cpus", str(n.num_cpus), "--num-gpus",
            str(n.num_gpus), "--resources", json.dumps(n.resources), "--node-manager-port", str(p["node_manager"]),
            "--object-manager-port", str(p["object_manager"]), "--dashboard-agent-listen-port", str(p["agent_listen"]),
            "--dashboard-agent-grpc-port", str(p["agent_grpc"]), "--runtime-env-agent-port",
            str(p["runtime_env_agent"]), "--metrics-export-port", str(p["metrics_export"]), "--min-worker-port",
            str(p["min_worker"]), "--max-worker-port", str(p["max_worker"]), "--object-store-memory",
            str(256 * 1024**2), "--disable-usage-stats"]
    if n.head:
        return args + ["--head", "--port", str(c.gcs_port), "--dashboard-host", n.ip, "--dashboard-port",
                       str(c.dashboard_port), "--ray-client-server-port", str(p["client_server"]), "--temp-dir",
                       c.temp_dir]
    return args + ["--address", c.gcs_address]


def node_env(c: LocalCluster) -> dict[str, str]:
    """The nodes' environment: this one's, token auth, offline hubs, and the Serve endpoint's API keys (conf/
    serve.yaml: keys live in the nodes' environment, never in the app's arguments the dashboard shows)."""
    env = {**os.environ, **c.env(), "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    key = Path(c.serve_key_path)
    if not env.get(SERVE_KEYS_ENV) and key.is_file():
        env[SERVE_KEYS_ENV] = key.read_text().strip()
    return env


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
    import shutil

    shutil.rmtree(c.temp_dir, ignore_errors=True)
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


def describe(c: LocalCluster) -> list[str]:
    lines = [f"RAY_ADDRESS={c.dashboard_url}", f"RAY_AUTH_TOKEN_PATH={c.token_path}",
             f"# GCS address (cluster.address=, ray.init): {c.gcs_address}; dashboard and job server: {c.dashboard_url}"]
    if Path(c.serve_key_path).is_file():
        lines.append(f"# the Serve endpoint's API key (the nodes' ${SERVE_KEYS_ENV}): {c.serve_key_path}")
    for n in c.nodes:
        res = ", ".join(f"{k} {v:g}" for k, v in n.resources.items())
        lines.append(f"# node {n.name}: {n.ip}, {n.num_cpus} CPUs, {n.num_gpus} GPUs, {res}, session {n.session}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.nodes", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["up", "down", "status", "lose", "start", "env"])
    p.add_argument("node", nargs="?", help="lose / start: the node's name (worker-1, ...)")
    p.add_argument("--dir", default="", help="where the cluster is recorded (default $ORCHESTRA_CLUSTER_DIR or runs/cluster)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--head-ip", default="127.0.0.11")
    p.add_argument("--gcs-port", type=int, default=6390)
    p.add_argument("--dashboard-port", type=int, default=8290)
    p.add_argument("--worker-cpus", type=int, default=8, help="logical CPUs per worker node")
    p.add_argument("--gpus-per-worker", type=int, default=1, help="logical GPUs per worker node")
    p.add_argument("--python", default="", help="the venv whose Ray runs the nodes (default: this one)")
    a = p.parse_args(argv)
    if a.command == "up":
        c = up(plan(Path(a.dir) if a.dir else None, a.workers, a.head_ip, a.gcs_port, a.dashboard_port, worker_cpus=a.worker_cpus,
                    gpus_per_worker=a.gpus_per_worker, python=a.python))
        print("\n".join(describe(c)))
        print(f"# use it: export RAY_ADDRESS={c.dashboard_url} RAY_AUTH_TOKEN_PATH={c.token_path}; "
              "make cluster-down stops it")
        return 0
    c = load(Path(a.dir) if a.dir else None)
    if a.command == "down":
        print(f"stopped {down(c)} processes of {len(c.nodes)} nodes ({c.dir})")
    elif a.command == "lose":
        r = lose(c, a.node or "")
        print(f"lost {r['node']} ({r['ip']}): {r['processes']} processes killed; the GCS saw it dead after "
              f"{r['detect_s']:.1f} s")
    elif a.command == "start":
        n = c.node(a.node or "")
        if n.session:
            raise SystemExit(f"start: {n.name} is running (session {n.session})")
        start_node(c, n)
        print(f"started {n.name} ({n.ip}): alive after {wait_alive(c, {n.ip}):.1f} s")
    elif a.command == "env":
        print(f"export RAY_ADDRESS={c.dashboard_url} RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={c.token_path}")
    else:
        seen = alive_nodes(c)
        print("\n".join(describe(c)))
        for n in c.nodes:
            print(f"{n.name} {n.ip}: {'alive' if seen.get(n.ip) else 'dead or absent'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
