"""The layout of a Ray cluster of several nodes on one machine (cluster/nodes/): its nodes (loopback IPs of their
own, ports and temp dirs of their own, resources), where it is recorded (`<dir>/cluster.json`: $ORCHESTRA_CLUSTER_DIR,
else runs/cluster), its token and Serve key, and the `ray start` command line of each node. Starting and stopping
them is cluster/nodes/lifecycle.py's.

Each node gets a temp dir of its own (`/tmp/orchestra-ray-<gcs port>[-<i>]`), as each machine of a real cluster has
its own disk: a worker node's runtime-env agent re-extracts a job's working dir under its temp dir (Ray's
working_dir plugin unpacks with overwrite), and in a temp dir shared with the head that deleted the submitted driver's
working directory under it (seen here: a verl job's final model merge failed with "Intel oneMKL FATAL ERROR: Cannot
load libtorch_cpu.so", its cwd gone).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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
    temp_dir: str = ""  # Ray's temp dir on this node (sessions, logs, sockets, unpacked working dirs)
    session: int = 0  # the session id of its processes (0: not running)


@dataclass
class LocalCluster:
    dir: str
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
                          resources={TOOLS_RESOURCE: 1.0} if i == 0 else {WORKERS_RESOURCE: 1.0}, ports=ports,
                          temp_dir=f"/tmp/orchestra-ray-{gcs_port}" + (f"-{i}" if i else "")))
    return LocalCluster(dir=str(Path(dir or default_dir()).resolve()), gcs_port=gcs_port,
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
            str(256 * 1024**2), "--temp-dir", n.temp_dir, "--disable-usage-stats"]
    if n.head:
        return args + ["--head", "--port", str(c.gcs_port), "--dashboard-host", n.ip, "--dashboard-port",
                       str(c.dashboard_port), "--ray-client-server-port", str(p["client_server"])]
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


def describe(c: LocalCluster) -> list[str]:
    lines = [f"RAY_ADDRESS={c.dashboard_url}", f"RAY_AUTH_TOKEN_PATH={c.token_path}",
             f"# GCS address (cluster.address=, ray.init): {c.gcs_address}; dashboard and job server: {c.dashboard_url}"]
    if Path(c.serve_key_path).is_file():
        lines.append(f"# the Serve endpoint's API key (the nodes' ${SERVE_KEYS_ENV}): {c.serve_key_path}")
    for n in c.nodes:
        res = ", ".join(f"{k} {v:g}" for k, v in n.resources.items())
        lines.append(f"# node {n.name}: {n.ip}, {n.num_cpus} CPUs, {n.num_gpus} GPUs, {res}, session {n.session}")
    return lines
