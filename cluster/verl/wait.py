"""Waiting on a verl job's cluster, bounded and said out loud: the GPUs and tool nodes it needs to join, the policy's
one download, and the run itself.

- `wait_for_nodes`: `ray up` returns once the head is up, while the GPU workers still pull the image, install torch and
  vLLM and compile flash-attn (tens of minutes); a KubeRay pod may wait for a GPU node. The job waits for
  `verl.nnodes` nodes of `verl.gpus_per_node` GPUs and for a node offering `cluster.tool_resources`, printing what is
  missing, up to `verl.join_timeout_s`; then it stops naming it. Before it, an actor that needs a GPU would wait
  under `cluster.start_timeout_s` and fail for a node that was only late.
- `fetch_policy`: an HF model id is downloaded once, by the driver, into `<verl.output_dir>/models/<id>` (the storage
  every node shares) before anything waits for a model: the warm start's learner loaded it in its constructor
  (16 GB for Qwen3-8B, inside its start timeout), and without the warm start each verl rank and vLLM replica would
  fetch it into its own node's cache. The job then runs with `model.name` = that directory.
- `watchdog`: a run that hangs inside verl stops after `verl.watchdog_s`, naming the free resources.
- `node_watch`: a node the job runs on lost mid-run (preempted, crashed) ends the job within seconds of Ray seeing it
  dead, naming the node and the newest checkpoint to resume from; without it verl's surviving ranks would wait in a
  collective for `verl.nccl_timeout_s` (30 minutes) and the job would stay RUNNING.
Launching is cluster/verl/job.py's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cluster.verl.config import newest_checkpoint_step, output_dir
from orchestra.config import ExperimentConfig

PROGRESS_EVERY_S = 60.0  # a progress line at least this often while nothing changes
POLL_S = 5.0
MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja"]  # weights, config, tokenizer, template


def missing(cfg: ExperimentConfig, nodes: list[dict[str, Any]]) -> list[str]:
    """What the job still lacks, one phrase each ([] when all joined): room for verl's per-node placement groups
    (verl.nnodes groups of verl.gpus_per_node GPUs, each on one node), and a node offering each tool resource."""
    v, alive = cfg.verl, [n.get("Resources", {}) for n in nodes if n.get("Alive")]
    slots = sum(int(r.get("GPU", 0) // v.gpus_per_node) for r in alive)
    out = []
    if slots < v.nnodes:
        out.append(f"{v.nnodes - slots} of {v.nnodes} nodes with {v.gpus_per_node} GPUs (verl.nnodes x "
                   f"verl.gpus_per_node; {sum(r.get('GPU', 0) for r in alive):g} GPUs joined)")
    for name, amount in cfg.cluster.tool_resources.items():
        if not any(r.get(name, 0) >= amount for r in alive):
            out.append(f"a node offering {name} (cluster.tool_resources: the tool servers' node)")
    return out


def wait_for_nodes(cfg: ExperimentConfig, nodes: Callable[[], list[dict[str, Any]]] | None = None,
                   clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                   say: Callable[[str], None] = print) -> float:
    """Blocks until missing() is empty; returns the seconds waited. RuntimeError after verl.join_timeout_s."""
    if nodes is None:
        import ray

        nodes = ray.nodes
    limit, start = cfg.verl.join_timeout_s, clock()
    last, said_at = None, start
    while True:
        lacking, waited = missing(cfg, nodes()), clock() - start
        if not lacking:
            if last is not None:
                say(f"cluster ready after {waited:.0f} s: every GPU node and tool node joined")
            return waited
        if waited >= limit:
            raise RuntimeError(f"the cluster still lacks {'; '.join(lacking)} after verl.join_timeout_s={limit:g}s "
                               "(ray up: `ray status` and the GPU workers' setup logs, `ray monitor`; KubeRay: the "
                               "pods' events)")
        if lacking != last or clock() - said_at >= PROGRESS_EVERY_S:
            say(f"waiting for the cluster ({waited:.0f} s of verl.join_timeout_s={limit:g}): missing "
                + "; ".join(lacking))
            last, said_at = lacking, clock()
        sleep(POLL_S)


def fetch_policy(cfg: ExperimentConfig, overrides: list[str]) -> tuple[ExperimentConfig, list[str]]:
    """The config (and the overrides the job's other processes rebuild it from) with `model.name` the policy's copy
    on the shared storage, downloaded once (a `.complete` marker: a rerun skips it). The embedded policies and a
    local directory are returned as they are."""
    name = cfg.model.name
    if name in ("tiny", "smollm2") or Path(name).expanduser().exists():
        return cfg, overrides
    target = Path(output_dir(cfg)) / "models" / name
    done = target / ".complete"
    if done.is_file():
        print(f"policy: {name} from {target} (downloaded by an earlier run)")
    else:
        from huggingface_hub import snapshot_download

        print(f"policy: downloading {name} once into {target}, the storage every node loads it from")
        snapshot_download(repo_id=name, local_dir=str(target), allow_patterns=MODEL_FILES)
        if not (target / "config.json").is_file():
            raise RuntimeError(f"model.name={name!r}: the download into {target} holds no config.json")
        done.write_text(name + "\n")
    local = str(target)
    return replace(cfg, model=replace(cfg.model, name=local)), [*overrides, f"model.name={local}"]


WATCHDOG_EXIT = 124  # the exit status of a run the watchdog ended from its thread (as `timeout` uses)
WATCHDOG_GRACE_S = 30.0


@contextlib.contextmanager
def watchdog(seconds: float, what: str):
    """The run stops after `seconds` with the cluster's free resources named (a placement group that can never be
    placed waits silently in verl; a failed weight sync into vLLM leaves verl's trainer waiting in update_weights for
    ever). 0: no limit. Main thread only. Two stages: SIGALRM raises TimeoutError in the main thread; a main thread
    blocked inside a C call (ray.get on a task that never returns: Python runs no signal handler there) is ended
    WATCHDOG_GRACE_S later from a timer thread, which prints the same message and exits with WATCHDOG_EXIT (Ray's
    reaper stops the local cluster; a submitted job's actors go with its driver)."""
    if seconds <= 0:
        yield
        return

    def message() -> str:
        try:
            import ray

            free = ray.available_resources() if ray.is_initialized() else {}
        except Exception as e:  # the message must come out even when Ray cannot answer
            free = f"unknown ({type(e).__name__})"
        return (f"{what} did not finish within verl.watchdog_s={seconds:g}s; free resources: {free} (a placement "
                "group that cannot be placed waits forever: give the cluster more CPUs/GPUs; a worker that died "
                "inside a call, e.g. vLLM's during a weight sync, leaves verl waiting: see the actors' logs)")

    def fire(*_: Any) -> None:
        raise TimeoutError(message())

    def backstop() -> None:
        print(f"{message()} [the main thread is blocked: exiting with {WATCHDOG_EXIT}]", file=sys.stderr, flush=True)
        os._exit(WATCHDOG_EXIT)

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    timer = threading.Timer(seconds + WATCHDOG_GRACE_S, backstop)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


NODE_LOST_EXIT = 75  # EX_TEMPFAIL: a lost node is worth a resubmission, not a fix of the config
NODE_POLL_S = 2.0
NODE_GRACE_S = 30.0  # after verl raised: how long to wait for Ray to mark a silent node dead (its health checks)


def job_nodes(cfg: ExperimentConfig, nodes: list[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """{node id: (IP, raylet port)} of the alive nodes the job runs on: those offering GPUs (verl's ranks and
    rollout) or a tool resource (the tool servers)."""
    tools = set(cfg.cluster.tool_resources)
    return {n["NodeID"]: (n["NodeManagerAddress"], int(n.get("NodeManagerPort") or 0)) for n in nodes
            if n.get("Alive") and (n.get("Resources", {}).get("GPU", 0) > 0 or tools & set(n.get("Resources", {})))}


def newest_checkpoint(cfg: ExperimentConfig) -> str:
    """The checkpoint a resubmission resumes from, as one phrase (verl's tracker file names the newest good one)."""
    ckpts, step = newest_checkpoint_step(cfg)
    if step is None:
        return f"none yet under {ckpts} (a resubmission starts at step 1)"
    return f"{ckpts}/global_step_{step} (a resubmission resumes at step {step + 1})"


def lost_line(what: str, lost: dict[str, str], cfg: ExperimentConfig, since_s: float) -> str:
    where = ", ".join(f"{ip} ({nid[:12]})" for nid, ip in lost.items())
    return (f"{what}: node {where} was lost {since_s:.0f} s into training (Ray marked it dead); the job ends here "
            f"(exit {NODE_LOST_EXIT}) instead of waiting in a collective. Newest checkpoint: {newest_checkpoint(cfg)}. "
            "Bring the node back (or another with the same resources) and submit the same command again.")


def unreachable(address: tuple[str, int], timeout_s: float = 2.0) -> bool:
    """Whether a node's raylet refuses (or does not answer) a connection: a node just lost, before Ray's health
    checks (seconds) mark it dead."""
    if not address[1]:
        return False
    try:
        socket.create_connection(address, timeout=timeout_s).close()
        return False
    except OSError:
        return True


def death_error(e: BaseException) -> bool:
    """Whether an error (or one it wraps: a task error's cause, an exception's chain) says a Ray worker, actor or node
    died: the errors a lost node raises before Ray has marked the node itself dead."""
    from ray import exceptions as rx

    kinds = (rx.RayActorError, rx.NodeDiedError, rx.WorkerCrashedError, rx.ObjectLostError, rx.ActorUnavailableError)
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, kinds):
            return True
        todo += [getattr(x, "cause", None), x.__cause__, x.__context__]
    return False


@contextlib.contextmanager
def node_watch(cfg: ExperimentConfig, what: str, nodes: Callable[[], list[dict[str, Any]]] | None = None,
               poll_s: float = NODE_POLL_S, grace_s: float = NODE_GRACE_S,
               exit: Callable[[int], None] = os._exit):
    """Ends the process (exit NODE_LOST_EXIT, from a thread: the main thread may be blocked in ray.get) once a node of
    `job_nodes` is dead, printing `lost_line` last. When the body raises first (verl saw its peer's connection close,
    or its actor die, before Ray marked the node dead) and a watched node's raylet does not answer (or the error says
    a worker died), it waits up to `grace_s` for Ray to mark the node dead, then prints the error and `lost_line` and
    exits the same way; any other error goes on at once."""
    if nodes is None:
        import ray

        nodes = ray.nodes
    watched, start = job_nodes(cfg, nodes()), time.monotonic()
    stop = threading.Event()

    def lost() -> dict[str, str]:
        try:
            alive = {n["NodeID"] for n in nodes() if n.get("Alive")}
        except Exception:  # the GCS busy or restarting: look again next poll
            return {}
        return {nid: address[0] for nid, address in watched.items() if nid not in alive}

    def loop() -> None:
        while not stop.wait(poll_s):
            gone = lost()
            if gone and not stop.is_set():  # the main thread is blocked (a collective waits for the dead peer)
                print(lost_line(what, gone, cfg, time.monotonic() - start), file=sys.stderr, flush=True)
                sys.stdout.flush()
                exit(NODE_LOST_EXIT)
                return

    thread = threading.Thread(target=loop, name="orchestra-node-watch", daemon=True)
    thread.start()
    try:
        yield watched
    except Exception as e:
        stop.set()  # this path says it from here on: one message, after the error
        suspect = death_error(e) or any(unreachable(address) for address in watched.values())
        deadline = time.monotonic() + (grace_s if suspect else 0.0)
        gone = lost()
        while not gone and time.monotonic() < deadline:
            time.sleep(poll_s)
            gone = lost()
        if not gone:
            raise
        traceback.print_exception(e)  # what verl raised, then the cause: the job's last lines name it
        print(lost_line(what, gone, cfg, time.monotonic() - start), file=sys.stderr, flush=True)
        sys.stdout.flush()
        exit(NODE_LOST_EXIT)
    finally:
        stop.set()
