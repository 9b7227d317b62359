"""Ray resources and actors for a training run — the only place that knows CPUs, GPUs and restarts.

`init_ray` attaches to `cluster.address` / $RAY_ADDRESS or starts a local cluster sized by config (token auth is
Ray's default and is left on). The `start_*` functions make the plain role classes of actors/ into named Ray
actors (readable in the dashboard: `learner`, `reward`, `rollout-worker-0`, `tool:search`, ...).
"""

from __future__ import annotations

import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import ray

from orchestra.config import ConfigError, ExperimentConfig
from tools.registry import zoo_dict


def init_ray(cfg: ExperimentConfig) -> str:
    """Attach or start; returns a short description for the console."""
    if ray.is_initialized():
        return "already initialised"
    address = cfg.cluster.address or os.environ.get("RAY_ADDRESS", "")
    env = {"env_vars": {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}}
    if address:
        ray.init(address=address, runtime_env=beside_job(env), log_to_driver=True)
        return f"attached to {address}"
    port = {"_metrics_export_port": cfg.cluster.metrics_export_port} if cfg.cluster.metrics_export_port else {}
    # address="local": a new cluster of this run's size even when `ray start` left one running here (plain
    # ray.init() would attach to it and then refuse num_cpus / object_store_memory with a traceback)
    ray.init(address="local", num_cpus=cfg.cluster.num_cpus,
             object_store_memory=cfg.cluster.object_store_memory_mb * 1024**2, include_dashboard=None,
             runtime_env=env, log_to_driver=True, **port)
    note = (" beside the Ray cluster `ray start` left running here (cluster.address=auto would use that one)"
            if other_local_cluster() else "")
    return f"local cluster ({ray.cluster_resources().get('CPU', 0):g} CPUs){note}"


def beside_job(env: dict[str, Any]) -> dict[str, Any]:
    """Our runtime_env without what the job this driver runs in already sets: under `ray job submit` Ray merges the
    job's runtime_env with the driver's and refuses one that names an env var both name."""
    import json

    job = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}") or "{}")
    taken = set((job.get("runtime_env") or {}).get("env_vars") or {})
    return {**env, "env_vars": {k: v for k, v in env.get("env_vars", {}).items() if k not in taken}}


def other_local_cluster() -> bool:
    """Whether `ray start` left a cluster running on this machine (Ray records its address in this file)."""
    import tempfile

    return (Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster").is_file()


def check_resources(cfg: ExperimentConfig) -> None:
    """Fail fast (instead of waiting forever for a placement) when the actors cannot fit the cluster."""
    c = cfg.cluster
    need_cpu = (c.num_rollout_workers * c.rollout_worker_cpus + c.learner_cpus + c.reward_cpus
                + len(cfg.zoo.tools) * cfg.zoo.server.num_cpus)
    need_gpu = c.num_rollout_workers * c.rollout_worker_gpus + c.learner_gpus
    have = ray.cluster_resources()
    if need_cpu > have.get("CPU", 0) + 1e-9 or need_gpu > have.get("GPU", 0) + 1e-9:
        raise RuntimeError(
            f"the run needs {need_cpu:g} CPUs and {need_gpu:g} GPUs but the cluster has {have.get('CPU', 0):g} CPUs "
            f"and {have.get('GPU', 0):g} GPUs; lower cluster.*_cpus / *_gpus or cluster.num_rollout_workers, "
            "or give a local cluster more logical CPUs with cluster.num_cpus")


def model_kwargs(cfg: ExperimentConfig) -> dict[str, Any]:
    m = cfg.model
    return {"tiny": m.tiny, "dtype": m.dtype, "device": m.device, "attn_implementation": m.attn_implementation,
            "cache_dir": m.cache_dir, "chat_template": m.chat_template, "seed": cfg.seed}


def prompter_kwargs(cfg: ExperimentConfig) -> dict[str, Any]:
    return cfg.agent.prompter_kwargs()


# The zoo tools that search a corpus (tools/registry.py: `search` through its backend, `retrieve` directly).
CORPUS_TOOLS = ("search", "retrieve")


def start_tool_servers(cfg: ExperimentConfig, corpus: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One tool-server actor per tool of the zoo (+ a spend ledger when zoo.spend_cap_usd is set). `corpus`: the
    passages the corpus tools index, sent in their constructors (the others get none), so a server never reads
    zoo.retriever.corpus on its own node: the KubeRay `tools` pod has no shared claim (cluster/kuberay/rayjob.yaml)."""
    from actors.tool_server import make_tool_servers

    zoo, pinned = zoo_dict(cfg.zoo), cfg.cluster.tool_resources
    handles, ledger = {}, None
    readers = [n for n in cfg.zoo.tools if n in CORPUS_TOOLS] if corpus is not None else []
    if readers:
        handles, ledger = make_tool_servers(zoo, readers, build_kwargs={"corpus": corpus}, resources=pinned)
    rest, _ledger = make_tool_servers(zoo, [n for n in cfg.zoo.tools if n not in readers], ledger=ledger,
                                      resources=pinned)
    handles.update(rest)
    where = f" (cluster.tool_resources={cfg.cluster.tool_resources}: a node must offer them)" \
        if cfg.cluster.tool_resources else ""
    wait_ready(cfg, [h.ready.remote() for h in handles.values()], "tool servers" + where)
    return handles


def wait_ready(cfg: ExperimentConfig, refs: list[Any], what: str) -> list[Any]:
    """Wait for actors to come up; a placement that never happens becomes an error naming what is free."""
    try:
        return ray.get(refs, timeout=cfg.cluster.start_timeout_s)
    except ray.exceptions.GetTimeoutError:
        raise RuntimeError(f"{what} did not start within cluster.start_timeout_s={cfg.cluster.start_timeout_s:g}s; "
                           f"free resources: {ray.available_resources()}") from None


REWARD_NAME = "reward"


def start_reward_actor(cfg: ExperimentConfig) -> Any:
    from actors.reward_actor import RewardActor

    r = cfg.reward
    # A killed reward actor restarts empty: retrying every call in flight (max_task_retries) makes the waiting
    # `submit`s re-form their groups in the new process, so in-flight groups are re-scored, not lost.
    # Only its metric counters since the last checkpoint are lost.
    cls = ray.remote(RewardActor).options(name=REWARD_NAME, num_cpus=cfg.cluster.reward_cpus, max_concurrency=1000,
                                          max_restarts=cfg.cluster.max_restarts,
                                          max_task_retries=cfg.cluster.max_restarts)
    return cls.remote(**RewardActor.config_kwargs(r, cfg.model, judge_expert(cfg)))


def judge_expert(cfg: ExperimentConfig) -> Any:
    """The expert named by reward.judge_expert (the `llm` judge's endpoint; its key stays an env-var name)."""
    name = cfg.reward.judge_expert
    if not name:
        return None
    if name not in cfg.zoo.experts:
        raise ValueError(f"reward.judge_expert: {name!r} is not an expert of zoo {cfg.zoo.name!r}")
    e = cfg.zoo.experts[name]
    return replace(e, model=e.model or name)


def start_learner(cfg: ExperimentConfig, name: str = "learner") -> Any:
    c = cfg.cluster
    # Never restarted in place: a restarted learner holds initial weights and no optimizer state, and a queued
    # update would train it silently. Trainer._recover replaces a dead one and restores the last checkpoint.
    from actors.learner_process import LearnerProcess

    cls = ray.remote(LearnerProcess).options(name=name, num_cpus=c.learner_cpus, num_gpus=c.learner_gpus,
                                             max_restarts=0, resources=dict(c.worker_resources))
    return cls.remote(cfg)


def start_rollout_workers(cfg: ExperimentConfig, tool_handles: dict[str, Any], reward: Any) -> list[Any]:
    from actors.rollout_worker import RolloutWorker
    from actors.tool_server import tool_actor_name

    c, e = cfg.cluster, cfg.engine
    if e.kind == "vllm":  # VLLMEngine loads weights from a saved directory and syncs them asynchronously
        raise ConfigError("engine.kind=vllm: the local backend's rollout workers run engine.kind=hf or remote (a "
                          "vLLM server: python -m cluster.vllm_server); in-process vLLM rollouts go through "
                          "backend=verl (and `make serve` takes engine.kind=vllm with a checkpoint)")
    workers = []
    for i in range(c.num_rollout_workers):
        # SPREAD: on a cluster of several nodes one worker per node where they fit, so a lost node takes one
        # worker's episodes (played again: cluster/rollouts.py), not all of them; one node: no difference
        cls = ray.remote(RolloutWorker).options(name=f"rollout-worker-{i}", num_cpus=c.rollout_worker_cpus,
                                                num_gpus=c.rollout_worker_gpus, max_restarts=c.max_restarts,
                                                max_concurrency=1000, resources=dict(c.worker_resources),
                                                scheduling_strategy="SPREAD")
        workers.append(cls.remote(
            worker_id=i, model_name=cfg.model.name, model_kwargs=model_kwargs(cfg), engine_kind=e.kind,
            engine_kwargs=e.hf_kwargs() if e.kind == "hf" else e.remote_kwargs() if e.kind == "remote" else {
                "max_batch_size": e.max_batch_size, "batch_wait_ms": e.batch_wait_ms},
            # by name, not handle: handles in a restartable actor's arguments stay in the object store, where a
            # restart may not find them (Ray warns); the worker looks the named actors up itself
            agent_kwargs=cfg.agent.loop_kwargs(), prompter_kwargs=prompter_kwargs(cfg),
            tool_handles={n: tool_actor_name(n) for n in tool_handles}, torch_threads=cfg.cluster.torch_threads,
            tool_timeout_s=cfg.zoo.server.timeout_s, tool_max_in_flight=cfg.zoo.server.client_max_in_flight,
            tool_replay=cfg.zoo.server.client_replay,
            reward_actor=REWARD_NAME if reward is not None else None,
            # τ² tasks run their own in-process tools (call_expert over the zoo's experts) and user simulator
            zoo=zoo_dict(cfg.zoo), tau2=asdict(cfg.tau2)))
    where = f" (cluster.worker_resources={c.worker_resources}: a node must offer them)" if c.worker_resources else ""
    wait_ready(cfg, [w.ready.remote() for w in workers], "rollout workers" + where)
    return workers


# The zoo tools that run model-written code in tools/sandbox.py (see tools/registry.py).
CODE_TOOLS = ("python", "enhance_reasoning")


def sandbox_preflight(cfg: ExperimentConfig) -> str | None:
    """The code sandbox's verdict before minutes of work, as the tool servers will reach it on this host: an
    error line when it would refuse every code call (no bubblewrap or syscall filter, no opt-in), a warning
    line when zoo.sandbox.allow_unconfined lets code run less isolated, None when all is well or no tool of
    the zoo runs code."""
    if not set(CODE_TOOLS) & set(cfg.zoo.tools):
        return None
    from tools.sandbox import Sandbox

    sandbox = Sandbox.from_config(cfg.zoo.sandbox)
    return sandbox_line(sandbox.shortfall, sandbox.allow_unconfined, "")


def sandbox_line(shortfall: str | None, allow_unconfined: bool, where: str) -> str | None:
    """The preflight's verdict as one line: error (code would be refused), warning (weaker isolation) or None."""
    from tools.sandbox import FIX

    if not shortfall:
        return None
    if allow_unconfined:
        return f"warning: zoo.sandbox.allow_unconfined=true: model-written code{where} runs with WEAKER isolation: " \
               f"{shortfall}"
    return f"error: the code sandbox{where} would refuse to run model-written code: {shortfall}. To fix: {FIX}"


def sandbox_preflight_servers(cfg: ExperimentConfig, handles: dict[str, Any]) -> list[str]:
    """The preflight where the code runs: every code tool's server probes its own sandbox, on its own node (a pod
    may lack what the driver's host has, e.g. Kubernetes' `procMount: Unmasked`), and checks what its KubeRay pod
    needs from the cluster (cluster/k8s_preflight.py; nothing off Kubernetes). One line per problem; a pod's
    missing preconditions once per host, as errors where its sandbox refuses (they say why), else as warnings."""
    from cluster.k8s_preflight import check

    names = [n for n in CODE_TOOLS if n in handles]
    verdicts = wait_ready(cfg, [handles[n].sandbox_verdict.remote(check) for n in names], "the sandbox preflight")
    lines, hosts = [], set()
    for n, v in zip(names, verdicts, strict=True):
        if not v:
            continue
        line = sandbox_line(v["shortfall"], v["allow_unconfined"], f" of tool server {n!r} on {v['host']}")
        lines += [line] if line else []
        if v["host"] not in hosts:
            hosts.add(v["host"])
            level = "error" if line and line.startswith("error") else "warning"
            lines += [f"{level}: pod {v['host']}: {problem}" for problem in v.get("pod", [])]
    return lines
