"""verl backend launcher: `python -m cluster.verl_job experiment=h100_2x8 [key=value ...] [--dry-run | --here]`.

From our ExperimentConfig it produces verl 0.9.1's Hydra overrides (`verl_overrides`) for its own
`ppo_trainer.yaml`, stages what verl's workers read (train/val parquet from our task set, and the agent-loop yaml
naming actors.verl_plugins.agent_loop.OrchestraAgentLoop, under `<run_dir>/verl/`), then
- (default) submits the job with `ray job submit` to $RAY_ADDRESS (RAY_AUTH_MODE=token: Ray 2.60 keeps token
  auth on and its CLI needs it), working dir = this project (never /tmp: Ray's /tmp/ray would shadow it), the
  entrypoint being this module with `--here` run by the cluster venv's python (`verl.python`);
- `--here`: runs verl's entry point in this process, as `python -m verl.trainer.main_ppo` would (compose,
  auto_set_device, validate_config, run_ppo with the V1 TaskRunner), after starting our named actors (`tool:<name>`
  tool servers and the `reward` RewardActor, cluster/launch.py) that the agent loop looks up;
- `--dry-run`: prints the resolved verl config and the `ray job submit` command; touches no cluster.
Pitfalls handled in the overrides: TransferQueue storage units (`transfer_queue.backend.SimpleStorage.
num_data_storage_units`, verl's default 8 reserve CPUs that small nodes lack), max_tool_response_length in
characters, tokenization sanity mode `ignore_strippable` (Qwen3's template strips think blocks), and no second
advantage normalisation under the toolorchestra rubric (see actors/verl_plugins/agent_loop.py). Tool-call timeouts are
`verl.tool_timeout_s`, enforced by the agent loop. Secrets reach the job as env vars named in
cluster/runtime_env.yaml `secret_env_vars`, read from the submitting environment and never printed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from orchestra.config import ConfigError, ExperimentConfig, load_config, task_tiers
from reward.rubric import rubric_of

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_ENV = ROOT / "cluster" / "runtime_env.yaml"
AGENT_LOOP_TARGET = "actors.verl_plugins.agent_loop.OrchestraAgentLoop"
REWARD_FN_PATH = "actors/verl_plugins/reward.py"
FLAGS = ("--dry-run", "--here")


def verl_config_dir() -> str:
    import importlib.util

    spec = importlib.util.find_spec("verl")  # locate without importing verl (seconds of torch/ray imports)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("verl is not installed in this environment (pip install verl==0.9.1)")
    return str(Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config")


def stage_dir(cfg: ExperimentConfig) -> str:
    return f"{cfg.run_dir.rstrip('/')}/verl"


def _hydra_list(items: list[str]) -> str:
    return "[" + ",".join("'" + i.replace("\\", "\\\\").replace("'", "\\'") + "'" for i in items) + "]"


def _gpu_split(cfg: ExperimentConfig) -> dict[str, int]:
    """Trainer vs rollout GPUs. separate_async gives rollout its own pool: half the nodes (or half the GPUs
    of a single node); the other modes share all GPUs between actor and rollout (hybrid engine)."""
    v = cfg.verl
    if v.trainer_mode != "separate_async":
        return {"nnodes": v.nnodes, "gpus": v.gpus_per_node, "r_nnodes": 0, "r_gpus": v.gpus_per_node}
    if v.nnodes >= 2:
        r = v.nnodes // 2
        return {"nnodes": v.nnodes - r, "gpus": v.gpus_per_node, "r_nnodes": r, "r_gpus": v.gpus_per_node}
    if v.gpus_per_node < 2:
        raise ConfigError("verl.trainer_mode: separate_async needs >= 2 GPUs; use sync on one GPU")
    half = v.gpus_per_node // 2
    return {"nnodes": 1, "gpus": v.gpus_per_node - half, "r_nnodes": 1, "r_gpus": half}


def verl_overrides(cfg: ExperimentConfig, orchestra_overrides: list[str]) -> list[str]:
    """Hydra overrides for verl's ppo_trainer.yaml, one `key=value` each (new keys carry a leading +)."""
    a, al, s, v = cfg.agent, cfg.algo, cfg.sampling, cfg.verl
    if cfg.engine.kind != "vllm":
        raise ConfigError(f"engine.kind: the verl backend rolls out with vllm, got {cfg.engine.kind!r}")
    if v.trainer_mode not in ("sync", "colocate_async", "separate_async"):
        raise ConfigError(f"verl.trainer_mode: sync | colocate_async | separate_async, got {v.trainer_mode!r}")
    stage = stage_dir(cfg)
    prompt_len = a.max_context_tokens
    response_len = a.max_context_tokens if a.context_mode == "transcript" else s.max_tokens
    gpus = _gpu_split(cfg)
    group_reward = rubric_of(cfg.reward.rubric).grouped
    ar = "actor_rollout_ref"
    o = [
        # data: our task set, staged as verl parquet (prompt, reward_model.ground_truth, extra_info.task)
        f"data.train_files={stage}/train.parquet", f"data.val_files={stage}/val.parquet",
        f"data.train_batch_size={al.prompts_per_step}", f"data.max_prompt_length={prompt_len}",
        f"data.max_response_length={response_len}", "data.filter_overlong_prompts=False",
        "data.truncation=left", "data.return_raw_chat=True", f"data.seed={cfg.seed}",
        # policy
        f"{ar}.model.path={cfg.model.name}", f"{ar}.model.enable_gradient_checkpointing=True",
        f"{ar}.model.use_remove_padding=True",
        f"{ar}.actor.strategy=fsdp", f"{ar}.actor.optim.lr={al.lr}", f"{ar}.actor.optim.weight_decay={al.weight_decay}",
        f"{ar}.actor.optim.clip_grad={al.grad_clip}", f"{ar}.actor.ppo_mini_batch_size={al.prompts_per_step}",
        f"{ar}.actor.ppo_micro_batch_size_per_gpu={al.micro_batch_size}", f"{ar}.actor.use_dynamic_bsz=True",
        f"{ar}.actor.ppo_max_token_len_per_gpu={max(prompt_len + response_len, 16384)}",
        f"{ar}.actor.ppo_epochs={al.ppo_epochs}", f"{ar}.actor.clip_ratio_low={al.clip_ratio_low}",
        f"{ar}.actor.clip_ratio_high={al.clip_ratio_high}", f"{ar}.actor.clip_ratio_c={al.clip_ratio_c}",
        f"{ar}.actor.loss_agg_mode={al.loss_agg_mode}", f"{ar}.actor.entropy_coeff=0",
        f"{ar}.actor.use_kl_loss=True", f"{ar}.actor.kl_loss_type={al.kl_type}", f"{ar}.actor.kl_loss_coef={al.kl_coef}",
        f"{ar}.ref.log_prob_micro_batch_size_per_gpu={al.micro_batch_size}",
        # rollout: vLLM replicas, G sessions per prompt, our agent loop
        f"{ar}.hybrid_engine={gpus['r_nnodes'] == 0}",
        f"{ar}.rollout.name=vllm", f"{ar}.rollout.mode=async", f"{ar}.rollout.n={al.group_size}",
        f"{ar}.rollout.nnodes={gpus['r_nnodes']}", f"{ar}.rollout.n_gpus_per_node={gpus['r_gpus']}",
        f"{ar}.rollout.tensor_model_parallel_size={v.tensor_parallel}",
        f"{ar}.rollout.gpu_memory_utilization={cfg.engine.gpu_memory_utilization}",
        f"{ar}.rollout.max_model_len={max(cfg.engine.max_model_len, prompt_len + response_len)}",
        f"{ar}.rollout.temperature={s.temperature}", f"{ar}.rollout.top_p={s.top_p}",
        f"{ar}.rollout.top_k={s.top_k if s.top_k > 0 else -1}", f"{ar}.rollout.calculate_log_probs=True",
        f"{ar}.rollout.log_prob_micro_batch_size_per_gpu={al.micro_batch_size}",
        f"{ar}.rollout.val_kwargs.n=1", f"{ar}.rollout.val_kwargs.temperature={cfg.eval.temperature}",
        f"{ar}.rollout.val_kwargs.do_sample={cfg.eval.temperature > 0}",
        f"{ar}.rollout.multi_turn.enable=True", f"{ar}.rollout.multi_turn.max_assistant_turns={a.max_turns}",
        f"{ar}.rollout.multi_turn.max_parallel_calls={a.max_calls_per_turn}",
        f"{ar}.rollout.multi_turn.max_tool_response_length={v.max_tool_response_chars}",
        f"{ar}.rollout.multi_turn.tokenization_sanity_check_mode=ignore_strippable",
        f"{ar}.rollout.multi_turn.format=hermes",
        f"{ar}.rollout.agent.default_agent_loop=orchestra",
        f"{ar}.rollout.agent.agent_loop_config_path={stage}/agent_loop.yaml",
        f"{ar}.rollout.agent.num_workers={cfg.cluster.num_rollout_workers}",
        # advantages: GRPO over the G sessions; never normalised twice (module docstring); the scalar rubric's
        # rewards divided by the group's std only when reward.norm_adv_by_std says so
        "algorithm.adv_estimator=grpo",
        f"algorithm.norm_adv_by_std_in_grpo={not group_reward and cfg.reward.norm_adv_by_std}",
        "algorithm.use_kl_in_reward=False",
        # TransferQueue on small nodes
        f"transfer_queue.backend.SimpleStorage.num_data_storage_units={v.storage_units}",
        # trainer: V1
        "trainer.use_v1=True", f"trainer.v1.trainer_mode={v.trainer_mode}",
        f"trainer.nnodes={gpus['nnodes']}", f"trainer.n_gpus_per_node={gpus['gpus']}",
        f"trainer.total_training_steps={al.steps}", "trainer.total_epochs=1000",
        "trainer.project_name=orchestra", f"trainer.experiment_name={cfg.name}",
        "trainer.logger=" + ("[console,tensorboard,wandb]" if cfg.log.wandb_project else "[console,tensorboard]"),
        f"trainer.save_freq={cfg.checkpoint.every_steps or -1}",
        f"trainer.max_actor_ckpt_to_keep={cfg.checkpoint.keep}",
        f"trainer.default_local_dir={cfg.run_dir.rstrip('/')}/checkpoints",
        f"trainer.test_freq={cfg.eval.every_steps or -1}", "trainer.val_before_train=True",
        "trainer.log_val_generations=4",
    ]
    if not group_reward:
        o += [f"reward.custom_reward_function.path={REWARD_FN_PATH}", "reward.custom_reward_function.name=compute_score",
              "+reward.custom_reward_function.reward_kwargs.orchestra_overrides=" + _hydra_list(orchestra_overrides)]
    return o + list(v.overrides)


def agent_loop_entries(orchestra_overrides: list[str]) -> list[dict[str, Any]]:
    """verl's agent-loop config file: name -> hydra `_target_` + constructor kwargs."""
    return [{"name": "orchestra", "_target_": AGENT_LOOP_TARGET, "orchestra_overrides": list(orchestra_overrides)}]


def compose(overrides: list[str]) -> Any:
    """verl's ppo_trainer config with our overrides, composed by Hydra exactly as verl's main does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=verl_config_dir(), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=list(overrides))


def load_runtime_env(path: Path = RUNTIME_ENV, environ: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(Ray runtime_env, names of secrets added). `secret_env_vars` (ours, not Ray's) names env vars copied
    from the submitting environment when set there."""
    environ = os.environ if environ is None else environ
    env = yaml.safe_load(path.read_text()) or {}
    names = env.pop("secret_env_vars", []) or []
    env_vars = {str(k): str(v) for k, v in (env.get("env_vars") or {}).items()}
    present = [n for n in names if environ.get(n)]
    env_vars.update({n: environ[n] for n in present})
    env["env_vars"] = env_vars
    return env, present


def stage(cfg: ExperimentConfig, orchestra_overrides: list[str]) -> Path:
    """Write train/val verl parquet and the agent-loop yaml under <run_dir>/verl (inside the working dir, so the
    job upload carries them to every node)."""
    from orchestra.data.sources import build_task_set
    from orchestra.data.tasks import save_verl_parquet
    from orchestra.tau2 import wiring as _tau2_wiring  # noqa: F401  registers the tau2: task source

    out = ROOT / stage_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    train, heldout, _ = build_task_set(cfg.data, task_tiers(cfg))
    save_verl_parquet(train, out / "train.parquet", split="train", agent_name="orchestra")
    save_verl_parquet(heldout or train[:1], out / "val.parquet", split="heldout", agent_name="orchestra")
    (out / "agent_loop.yaml").write_text(yaml.safe_dump(agent_loop_entries(orchestra_overrides), sort_keys=False))
    return out


def submission_id(cfg: ExperimentConfig) -> str:
    return f"orchestra-{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def submit_command(cfg: ExperimentConfig, orchestra_overrides: list[str], runtime_env_file: str,
                   job_id: str) -> list[str]:
    entry = [cfg.verl.python, "-m", "cluster.verl_job", *orchestra_overrides, "--here"]
    return ["ray", "job", "submit", "--address", os.environ.get("RAY_ADDRESS", "$RAY_ADDRESS"),
            "--working-dir", ".", "--runtime-env", runtime_env_file, "--submission-id", job_id, "--no-wait",
            "--", *entry]


def submit_env() -> dict[str, str]:
    # Token auth stays on; .gitignore'd runs/<name>/verl must still be uploaded (runtime_env `excludes` rule).
    return {"RAY_AUTH_MODE": "token", "RAY_RUNTIME_ENV_IGNORE_GITIGNORE": "1"}


def validate_verl_config(verl_cfg: Any) -> None:
    """verl's own cross-field checks (batch sizes vs GPUs, loss settings), as its main runs them."""
    import warnings

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Disabled critic")  # GRPO has no critic, by design
        validate_config(config=verl_cfg, use_reference_policy=need_reference_policy(verl_cfg),
                        use_critic=need_critic(verl_cfg))


def run_here(cfg: ExperimentConfig, verl_cfg: Any) -> None:
    """verl's `main` as a library call, with our named actors started first in the same Ray job."""
    import ray
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    from cluster.launch import start_reward_actor, start_tool_servers

    auto_set_device(verl_cfg)
    validate_verl_config(verl_cfg)
    if not ray.is_initialized():
        runtime_env = get_ppo_ray_runtime_env(verl_cfg)
        runtime_env.setdefault("env_vars", {})["TRANSFER_QUEUE_ENABLE"] = "1"
        ray.init(runtime_env=OmegaConf.to_container(OmegaConf.create(runtime_env)))
    start_tool_servers(cfg)
    if rubric_of(cfg.reward.rubric).grouped:
        start_reward_actor(cfg)
    run_ppo(verl_cfg, task_runner_class=TaskRunnerV1)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = {a for a in argv if a in FLAGS}
    unknown = [a for a in argv if a.startswith("--") and a not in FLAGS]
    if unknown:
        print(f"unknown flag(s) {unknown}; known: {list(FLAGS)}", file=sys.stderr)
        return 2
    overrides = [a for a in argv if a not in FLAGS]
    try:
        cfg = load_config(overrides)
        if cfg.backend != "verl":
            raise ConfigError(f"backend: cluster.verl_job needs backend=verl, got {cfg.backend!r}")
        ov = verl_overrides(cfg, overrides)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        return 2
    verl_cfg = compose(ov)
    if "--dry-run" in flags:
        from omegaconf import OmegaConf

        env, secrets = load_runtime_env()
        print(OmegaConf.to_yaml(verl_cfg, resolve=True))
        validate_verl_config(verl_cfg)
        print("# agent-loop yaml (" + stage_dir(cfg) + "/agent_loop.yaml):")
        print(yaml.safe_dump(agent_loop_entries(overrides), sort_keys=False))
        print(f"# runtime_env: env_vars {sorted(env['env_vars'])} (secret values from your environment: "
              f"{secrets or 'none set'}, never printed); excludes {env.get('excludes', [])}")
        prefix = " ".join(f"{k}={v}" for k, v in submit_env().items())
        cmd = shlex.join(submit_command(cfg, overrides, "RUNTIME_ENV_JSON", submission_id(cfg)))
        cmd = cmd.replace("'$RAY_ADDRESS'", "$RAY_ADDRESS").replace("RUNTIME_ENV_JSON", "$RUNTIME_ENV_JSON")
        print("# submit ($RUNTIME_ENV_JSON: cluster/runtime_env.yaml + your secrets, a 0600 temp file the launcher "
              "writes and deletes):\n" + prefix + " " + cmd)
        return 0
    if "--here" in flags:
        if not (ROOT / stage_dir(cfg) / "agent_loop.yaml").is_file():
            stage(cfg, overrides)
        os.chdir(ROOT)  # verl resolves the staged relative paths against the working dir
        run_here(cfg, verl_cfg)
        return 0
    if not os.environ.get("RAY_ADDRESS"):
        print("RAY_ADDRESS is not set: point it at the cluster's dashboard (http://HEAD:8265), or use --here / "
              "--dry-run", file=sys.stderr)
        return 2
    stage(cfg, overrides)
    env, _ = load_runtime_env()
    # The secrets go through a private file, not the command line (visible in `ps`) nor the console.
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        os.chmod(f.name, 0o600)
        json.dump(env, f)
    job_id = submission_id(cfg)
    cmd = submit_command(cfg, overrides, f.name, job_id)
    ray_cli = Path(sys.executable).parent / "ray"  # this venv's Ray CLI (same version as the cluster's)
    if ray_cli.is_file():
        cmd[0] = str(ray_cli)
    try:
        rc = subprocess.call(cmd, cwd=ROOT, env={**os.environ, **submit_env()})
    finally:
        os.unlink(f.name)
    if rc == 0:
        print(f"submitted {job_id}; follow it with:\n  RAY_AUTH_MODE=token ray job logs --address "
              f"$RAY_ADDRESS -f {job_id}\n  (rollouts, actors and GPU use: the Ray dashboard at $RAY_ADDRESS)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
