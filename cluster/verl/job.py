"""verl backend launcher: `python -m cluster.verl.job experiment=h100_2x8 [key=value ...] [--dry-run | --here]`.

- (default) submits the job with `ray job submit` to $RAY_ADDRESS (cluster/verl/submit.py: the working dir, the
  runtime_env without secrets, what a cluster on this machine shares with the submitter).
- `--here`: runs verl's entry point in this process, as `python -m verl.trainer.main_ppo` would (compose,
  auto_set_device, validate_config, run_ppo with the V1 TaskRunner), after downloading an HF policy once into the
  shared storage and staging the task files under `<verl.output_dir>/verl/` (`stage`). It joins the Ray cluster it
  runs in (`cluster.address`, or the RAY_ADDRESS Ray gives a submitted job; one of its own only without either),
  waits for the GPU and tool nodes to join (cluster/verl/wait.py), checks the code sandbox, and starts our named
  actors (`tool:<name>` tool servers, `search` on the staged corpus, and the `reward` RewardActor for grouped
  rubrics), whose handles it holds for the job's lifetime (a named actor without a handle is garbage-collected).
  During training a lost node ends the job naming it and the newest checkpoint (`node_watch`); after it, where the
  ranks and tool servers ran is said (cluster/verl/placement.py). `verl.platform=cpu` runs the same trainer on CPU
  through verl's plugin points (actors/verl_plugins/cpu_platform.py): how CI proves this path.
- `--dry-run`: prints the resolved verl config and the `ray job submit` command; touches no cluster.
The config translation is cluster/verl/config.py; the plan it prints (updates, padding, checkpoint bytes, the
resumed step) cluster/verl/plan.py's; the files the job stages and exports (`stage`, the warm-started policy, the
merged HF dir) are cluster/verl/stage.py's.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from cluster.verl.config import (
    CPU_PLUGIN,
    ROOT,
    compose,
    group_deadline_s,
    output_dir,
    rollout_name,
    stage_dir,
    validate_verl_config,
    verl_overrides,
)
from cluster.verl.placement import print_placement
from cluster.verl.plan import check_cadence, checkpoint_line, resume_plan, updates_line
from cluster.verl.stage import export_hf, stage, warm_start_stage
from cluster.verl.submit import dry_run, submit
from cluster.verl.wait import fetch_policy, node_watch, wait_for_nodes, watchdog
from orchestra.config import ConfigError, ExperimentConfig, load_config
from orchestra.config.cli import parse_cli
from reward.rubric import rubric_of

PG_PLUGIN = "actors.verl_plugins.process_group"
PG_TIMEOUT_ENV = "ORCHESTRA_PG_TIMEOUT_S"  # read by PG_PLUGIN
CKPT_PLUGIN = "actors.verl_plugins.checkpoint"  # one HSDP replica group writes the checkpoint's shards
FLAGS = ("--dry-run", "--here")


def platform_env(cfg: ExperimentConfig) -> dict[str, str]:
    """Env vars every verl process gets (Ray runtime_env): TensorBoard under the output dir; the plugin modules verl
    imports at start-up (verl/__init__.py:49): the process-group timeout and the one-replica checkpoint writes
    everywhere, on the CPU platform also the platform it selects."""
    env = {"TENSORBOARD_DIR": f"{output_dir(cfg)}/tb", "VERL_USE_EXTERNAL_MODULES": f"{PG_PLUGIN},{CKPT_PLUGIN}",
           PG_TIMEOUT_ENV: f"{cfg.verl.nccl_timeout_s:g}"}
    if cfg.verl.trainer_mode == "separate_async":
        # verl/trainer/ppo/v1/trainer_separate_async.py:181-185 passes print's `flush=True` to logger.info: a
        # TypeError whenever that logger is at INFO (its default, VERL_LOGGING_LEVEL); at WARNING the call is skipped
        env["VERL_LOGGING_LEVEL"] = "WARNING"
    if cfg.verl.platform == "cpu":
        env.update(VERL_USE_EXTERNAL_MODULES=f"{CPU_PLUGIN},{PG_PLUGIN},{CKPT_PLUGIN}", VERL_PLATFORM="cpu",
                   OMP_NUM_THREADS="1")
        if rollout_name(cfg) == "vllm":  # also set by the platform's rollout_env_vars hook; here for every process
            env.update(VLLM_CPU_OMP_THREADS_BIND="nobind")
    return env


def check_cpu_vllm(cfg: ExperimentConfig) -> None:
    """verl.rollout=vllm on the CPU platform needs this interpreter's venv to hold the pinned set (one line if not)."""
    if not (cfg.verl.platform == "cpu" and rollout_name(cfg) == "vllm"):
        return
    from cluster.vllm_cpu_env import mismatches

    bad = mismatches(Path(sys.prefix))
    if bad:
        raise ConfigError(f"verl.rollout=vllm: this interpreter's venv ({sys.prefix}) has {bad[0]}: run the job with "
                          f"the venv `make verl-vllm-cpu` builds ({ROOT}/.venv-verl-vllm/bin/python)")


def prepare_here(cfg: ExperimentConfig) -> ExperimentConfig:
    """The config the job's own actors run with: `search` on the staged corpus (never silently web search), the
    reward barrier's deadline sized to the longest allowed episode."""
    zoo = cfg.zoo
    if not zoo.retriever.corpus:
        zoo = replace(zoo, retriever=replace(zoo.retriever, corpus=f"{stage_dir(cfg)}/corpus.jsonl"))
    return replace(cfg, zoo=zoo, reward=replace(cfg.reward, group_deadline_s=group_deadline_s(cfg)))


def start_job_actors(cfg: ExperimentConfig) -> dict[str, Any]:
    """The job's named actors, each waited for under cluster.start_timeout_s (an actor that cannot be placed
    becomes an error naming the free resources, not a silent wait): `tool:<name>` servers, and `reward` for
    grouped rubrics. Refuses, before any training, a code sandbox that would refuse code where a code tool's
    server runs (its own node: cluster.tool_resources pins them, cluster/kuberay/rayjob.yaml's `tools` pods)."""
    from cluster.launch import sandbox_preflight_servers, start_reward_actor, start_tool_servers, wait_ready
    from orchestra.data.tasks import load_corpus

    # read here, on the driver's node (the shared claim): the `tools` pod that runs `search` has no claim
    corpus = load_corpus(cfg.zoo.retriever.corpus) if cfg.zoo.retriever.corpus else None
    actors: dict[str, Any] = {"tools": start_tool_servers(cfg, corpus)}
    lines = sandbox_preflight_servers(cfg, actors["tools"])
    errors = [line for line in lines if line.startswith("error")]
    for line in lines:
        print(line, file=sys.stderr)
    if errors:
        raise ConfigError(errors[0])
    if rubric_of(cfg.reward.rubric).grouped:
        actors["reward"] = start_reward_actor(cfg)
        wait_ready(cfg, [actors["reward"].totals.remote()], "the reward actor")
    return actors


def run_here(cfg: ExperimentConfig, verl_cfg: Any) -> None:
    """verl's `main` as a library call, with our named actors started first in the same Ray job."""
    from omegaconf import OmegaConf

    check_cpu_vllm(cfg)
    cfg = prepare_here(cfg)
    print(updates_line(cfg))
    print(checkpoint_line(cfg))
    resumed = resume_plan(cfg)  # verl resumes from the newest checkpoint: say which tasks its first step plays
    if resumed:
        print(f"resuming at step {resumed[0]} from staged row {resumed[1]}: tasks {resumed[2]}")
    env = platform_env(cfg)
    os.environ.update(env)  # this process too: the driver imports verl (and the CPU plugin) below
    import ray
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    if cfg.verl.platform == "cpu":
        import importlib

        importlib.import_module(CPU_PLUGIN)
    auto_set_device(verl_cfg)
    validate_verl_config(verl_cfg)
    if not ray.is_initialized():
        runtime_env = OmegaConf.to_container(OmegaConf.create(get_ppo_ray_runtime_env(verl_cfg)))
        runtime_env.setdefault("env_vars", {}).update({"TRANSFER_QUEUE_ENABLE": "1", **env})
        address = cluster_address(cfg)
        if address:  # the cluster the job runs in (`ray job submit` sets RAY_ADDRESS), on every platform
            from cluster.launch import beside_job

            ray.init(address=address, runtime_env=beside_job(runtime_env))
            print(f"attached to the Ray cluster at {address} ({len([n for n in ray.nodes() if n['Alive']])} nodes)")
        elif cfg.verl.platform == "cpu":  # logical GPUs for verl's resource pools, a local cluster of our size
            ray.init(address="local", num_cpus=cfg.verl.cpu_num_cpus, num_gpus=cfg.verl.nnodes * cfg.verl.gpus_per_node,
                     object_store_memory=cfg.cluster.object_store_memory_mb * 1024**2, runtime_env=runtime_env)
        else:
            ray.init(runtime_env=runtime_env)
    wait_for_nodes(cfg)  # `ray up` returns before its GPU workers are set up: wait for them, saying what is missing
    # held until run_ppo returns: Ray collects a named actor whose last handle is gone
    actors = start_job_actors(cfg)
    if cfg.verl.warm_start:
        warm_start_stage(cfg, actors["tools"])
    with watchdog(cfg.verl.watchdog_s, f"verl job {cfg.name}"), node_watch(cfg, f"verl job {cfg.name}"):
        run_ppo(verl_cfg, task_runner_class=TaskRunnerV1)
    print_placement(cfg)
    del actors
    export_hf(cfg)
    print("INFO heldout_follows_preference: not judged (the verl job scores no held-out tasks under the presets or the"
          " sweep: run make eval on its exported policy, <verl.output_dir>/hf)")


def cluster_address(cfg: ExperimentConfig) -> str:
    """The Ray cluster to join: `cluster.address`, else $RAY_ADDRESS (under `ray job submit`, the GCS address of the
    cluster the job runs in); "" starts one of the job's own (one machine)."""
    address = cfg.cluster.address or os.environ.get("RAY_ADDRESS", "")
    if address.startswith(("http://", "https://")):
        raise ConfigError(f"cluster.address / RAY_ADDRESS: {address} is a dashboard (job server) address, for "
                          "`ray job submit`; --here joins a cluster through its GCS address (HOST:PORT, e.g. "
                          "127.0.0.11:6390 of make cluster-up)")
    return address


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cli = parse_cli(argv, "cluster.verl.job", flags=FLAGS)
        flags, overrides = cli.flags, cli.overrides
        cfg = load_config(overrides)
        if cfg.backend != "verl":
            raise ConfigError(f"backend: cluster.verl.job needs backend=verl, got {cfg.backend!r}")
        verl_cfg = compose(verl_overrides(cfg, overrides))
        check_cadence(cfg)
        if "--dry-run" in flags:
            return dry_run(cfg, overrides, verl_cfg)
        if "--here" not in flags:
            return submit(cfg, overrides)
        # the policy downloaded once into the shared storage, before the learner or verl's ranks wait for it
        cfg, overrides = fetch_policy(cfg, overrides)
        verl_cfg = compose(verl_overrides(cfg, overrides))
        stage(cfg, overrides)
        run_here(cfg, verl_cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
