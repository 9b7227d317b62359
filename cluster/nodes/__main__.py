"""`python -m cluster.nodes up|down|status|lose NODE|start NODE|env` (what `make cluster-up` / `make cluster-down`
run): a Ray cluster of several nodes on this machine (cluster/nodes/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cluster.nodes.layout import describe, load, plan
from cluster.nodes.lifecycle import alive_nodes, down, lose, start_node, up, wait_alive


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cluster.nodes", description="A Ray cluster of several nodes on this machine (cluster/nodes/)")
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
