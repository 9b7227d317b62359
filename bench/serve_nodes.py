"""Serve across nodes, one node lost under load: the OpenAI-compatible endpoint (`python -m cluster.serve`) with two
replicas on the two worker nodes of a Ray cluster on this machine (cluster/nodes.py; `max_replicas_per_node=1`,
replicas pinned to `orchestra_workers`, one HTTP proxy on the head), a bounded load on loopback (200 requests,
8 at a time, each retried at most twice on a 5xx or a dropped connection, as OpenAI's SDK retries), and a quarter
of the way in the node of one replica is lost (SIGKILL to its raylet and workers) and, once Ray has marked it
dead, comes back (a replacement machine joining).
Prints RESULT nodes_serve_requests, nodes_serve_lost_requests (failed after their retries; goal 0),
nodes_serve_retried (requests that needed a retry), nodes_serve_p50_ms / nodes_serve_p99_ms (per request, retries
included) and nodes_serve_capacity_back_s (from the loss until two replicas run again).
bench/nodes.py runs it on its cluster with the merged verl weights; alone it starts a cluster of its own and serves
the untrained tiny policy: `python bench/serve_nodes.py [--out DIR] [--python PY]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster import nodes  # noqa: E402

REQUESTS, CONCURRENCY, RETRIES, PORT = 200, 8, 2, 8491
APP, DEPLOYMENT = "orchestra", "OrchestraServer"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def start_serve(c: nodes.LocalCluster, python: str, checkpoint: str, log: Path) -> subprocess.Popen:
    """`python -m cluster.serve` attached to the cluster (RAY_ADDRESS: its GCS); returns once it serves."""
    cmd = [python, "-m", "cluster.serve", f"checkpoint={checkpoint}", "replicas=2", "max_replicas_per_node=1",
           "resources={orchestra_workers: 0.001}", "proxy_location=HeadOnly", f"host={c.head.ip}", f"port={PORT}",
           "rate_limit_per_s=1000", "rate_limit_burst=1000"]
    env = {**os.environ, **c.env(), "RAY_ADDRESS": c.gcs_address, "PYTHONPATH": str(ROOT),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    f = log.open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while "is serving at" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"cluster.serve did not start: {log.read_text(errors='replace')[-3000:]}")
        time.sleep(1.0)
    return proc


def replicas(c: nodes.LocalCluster) -> list[dict]:
    """The deployment's replicas as Serve reports them (the dashboard's Serve API, with the cluster's token)."""
    import httpx

    token = Path(c.token_path).read_text().strip()
    r = httpx.get(f"{c.dashboard_url}/api/serve/applications/", headers={"Authorization": f"Bearer {token}"},
                  timeout=10)
    r.raise_for_status()
    app = (r.json().get("applications") or {}).get(APP) or {}
    return list(((app.get("deployments") or {}).get(DEPLOYMENT) or {}).get("replicas") or [])


def replica_nodes(c: nodes.LocalCluster) -> list[str]:
    """The node names of the RUNNING replicas."""
    by_ip = {n.ip: n.name for n in c.nodes}
    return [by_ip.get(r.get("node_ip", ""), "?") for r in replicas(c) if r.get("state") == "RUNNING"]


async def load(url: str, key: str, done: list, outcomes: list) -> None:
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for i in range(REQUESTS):
        queue.put_nowait(i)

    async def client() -> None:
        async with httpx.AsyncClient(timeout=120) as http:
            while not queue.empty():
                i = queue.get_nowait()
                start, attempts, ok = time.monotonic(), 0, False
                while attempts <= RETRIES and not ok:
                    attempts += 1
                    try:
                        r = await http.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                                            json={"messages": [{"role": "user", "content": f"What is {i} + 7?"}],
                                                  "preference": "balanced"})
                        ok = r.status_code == 200
                        if r.status_code < 500 and not ok:
                            break  # a 4xx is the request's own fault: not retried
                    except httpx.HTTPError:
                        ok = False
                outcomes.append({"ok": ok, "attempts": attempts, "s": time.monotonic() - start})
                done.append(i)

    await asyncio.gather(*(client() for _ in range(CONCURRENCY)))


def serve_under_loss(c: nodes.LocalCluster, python: str, checkpoint: Path | str, out: Path) -> dict:
    proc = start_serve(c, python, str(checkpoint), out / "serve.log")
    try:
        placed = replica_nodes(c)
        say(f"serve: replicas running on {placed}")
        victim = placed[-1]
        key = Path(c.serve_key_path).read_text().strip()
        done, outcomes, lost_at = [], [], {}

        def loser() -> None:
            while len(done) < REQUESTS // 4:
                time.sleep(0.1)
            lost_at["t"] = time.monotonic()
            say(f"serve: losing {victim} after {len(done)} requests")
            nodes.lose(c, victim, wait=True)
            nodes.start_node(c, c.node(victim))

        import threading

        thread = threading.Thread(target=loser, daemon=True)
        thread.start()
        asyncio.run(load(f"http://{c.head.ip}:{PORT}", key, done, outcomes))
        thread.join(timeout=300)
        back = float("nan")
        deadline = time.monotonic() + 600
        while "t" in lost_at and time.monotonic() < deadline:
            if len(replica_nodes(c)) == 2:
                back = time.monotonic() - lost_at["t"]
                break
            time.sleep(1.0)
        ms = sorted(1000 * o["s"] for o in outcomes)
        lost = sum(not o["ok"] for o in outcomes) + REQUESTS - len(outcomes)
        say(f"serve: {len(outcomes)} answered, {lost} lost, {sum(o['attempts'] > 1 for o in outcomes)} retried; "
            f"two replicas again {back:.1f} s after the loss, on {replica_nodes(c)}")
        return {"nodes_serve_requests": REQUESTS, "nodes_serve_lost_requests": lost,
                "nodes_serve_retried": sum(o["attempts"] > 1 for o in outcomes),
                "nodes_serve_p50_ms": statistics.median(ms) if ms else float("nan"),
                "nodes_serve_p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else float("nan"),
                "nodes_serve_capacity_back_s": back}
    finally:
        proc.send_signal(signal.SIGINT)  # cluster.serve shuts Serve down on SIGINT
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_serve_nodes"))
    p.add_argument("--python", default=sys.executable)
    a = p.parse_args()
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    c = nodes.plan(out / "cluster", head_ip="127.0.0.31", gcs_port=6590, dashboard_port=8590, python=a.python)
    os.environ.update(c.env())
    try:
        nodes.up(c)
        figures = serve_under_loss(c, a.python, "", out)
    finally:
        nodes.down(c)
    for k, v in figures.items():
        print(f"RESULT {k}={v:.4g}" if isinstance(v, float) else f"RESULT {k}={v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
