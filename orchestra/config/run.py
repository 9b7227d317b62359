"""The configuration's run sections: cluster resources, logs, checkpoints and the τ² benchmark driver."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClusterConfig:
    address: str = ""  # empty: $RAY_ADDRESS, else start a local cluster
    num_cpus: int | None = None  # local cluster only
    object_store_memory_mb: int = 512
    num_rollout_workers: int = 1
    rollout_worker_cpus: float = 1.0
    rollout_worker_gpus: float = 0.0
    learner_cpus: float = 0.5
    learner_gpus: float = 0.0
    reward_cpus: float = 0.05
    max_restarts: int = 3
    start_timeout_s: float = 600.0  # actors not placed by then: a clear error, not an endless wait
    # custom Ray resources each tool server of a training or verl job asks for: pins them to the nodes that offer
    # them (the pods or hosts whose code sandbox can run: cluster/kuberay/rayjob.yaml's `tools` group); {}: anywhere
    tool_resources: dict[str, float] = field(default_factory=dict)
    # custom Ray resources the rollout workers and the learner ask for: pins them to the nodes that offer them (a
    # cluster's worker nodes: `make cluster-up` gives them orchestra_workers); {}: anywhere
    worker_resources: dict[str, float] = field(default_factory=dict)
    torch_threads: int = 0  # threads per learner / rollout process; 0: Ray's default (its num_cpus, at least 1)
    metrics_export_port: int = 0  # local cluster: the Prometheus export port (dashboard metrics); 0: Ray picks


@dataclass
class LogConfig:
    tensorboard: bool = True
    wandb_project: str = ""  # used only when WANDB_API_KEY is set
    plots: bool = True
    episodes: bool = True  # record every episode to <run_dir>/episodes/ for cluster/replay.py
    # also keep each policy version's weights there, so replay can reproduce every episode, not only those
    # sampled with checkpointed weights (the policy's size per RL step: cheap for tiny, not for an 8B model)
    replay_weights: bool = False


@dataclass
class CheckpointConfig:
    every_steps: int = 5
    keep: int = 2


@dataclass
class Tau2Config:
    """τ²-bench episodes (tools/tau2/): the simulated user, the optional NL-assertion judge, driver limits.
    Used for tasks whose data_source starts with `tau2/` (training) and `dataset=tau2:*` (evaluation).
    Keys are read from the environment variables named here; a key itself never enters config or logs."""

    domain: str = "airline"  # airline | retail | mock (for `dataset=tau2` without a domain)
    task_version: str = "v0.2.0"  # v0.2.0 (the wheel's tasks) | current (needs tasks_path)
    tasks_path: str = ""  # a τ² tasks.json overriding the wheel's file
    user_model: str = ""  # litellm name, e.g. openai/<name> with user_api_base; empty: no τ² episodes
    user_api_base: str = ""
    user_api_key_env: str = ""
    user_temperature: float = 0.0
    user_timeout_s: float = 60.0
    user_num_retries: int = 2
    nl_judge_model: str = ""  # e.g. openai/<name>; empty: NL assertions are skipped (and say so)
    nl_judge_base: str = ""
    nl_judge_key_env: str = ""
    max_errors: int = 10  # tool errors before the episode ends (tau2 scores it 0)
    call_expert: bool = True  # replace transfer_to_human_agents by call_expert over the zoo's tiers
    expert_max_tokens: int = 1024
    concurrency: int = 4  # evaluation: episodes in flight
