"""What a verl run will do, as the numbers the dry run and the job print: optimizer steps and padding per RL step,
bytes and cadence of its checkpoints, and the tasks a resumed run's first step plays.

Arithmetic on our config and the files the job wrote; no Ray, no verl import. The verl facts it rests on (0.9.1):
a step's rows are padded to a multiple of lcm(data-parallel ranks, ppo_mini_batch_size x rollout.n) with empty rows of
SYNTHETIC_PADDING_SEQ_LEN tokens (verl/trainer/ppo/v1/trainer_base.py `_get_required_batch_multiple`, padding_utils.py);
the actor trains fp32 weights with AdamW (actor.fsdp_config.model_dtype, actor.optim), so a checkpoint holds 12 bytes
per parameter, written once by one HSDP replica group (actors/verl_plugins/checkpoint.py); verl saves its
dataloader's position in data.pt beside each checkpoint and restores it on resume (v1/trainer_base.py:893, :999).
The verl config itself is cluster/verl/config.py's; launching is cluster/verl/job.py's.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from cluster.verl.config import (
    gpu_split,
    mini_batch_prompts,
    newest_checkpoint_step,
    rows_per_step,
    stage_dir,
)
from orchestra.config import ConfigError, ExperimentConfig

PAD_ROW_TOKENS = 128  # verl/trainer/ppo/padding_utils.py SYNTHETIC_PADDING_SEQ_LEN
BYTES_PER_PARAM = 12  # fp32 weights + AdamW's exp_avg and exp_avg_sq, fp32


def prompts_phrase(cfg: ExperimentConfig) -> str:
    step, tasks = rows_per_step(cfg), cfg.algo.prompts_per_step
    return f"{step} prompts" + (f" ({tasks} tasks x {step // tasks} paired vectors)" if step != tasks else "")


def updates_line(cfg: ExperimentConfig) -> str:
    """What one RL step does to the optimizer, and the padding verl adds to it: printed by the dry run and the job."""
    al, a = cfg.algo, cfg.agent
    step, mini, n = rows_per_step(cfg), mini_batch_prompts(cfg), al.group_size
    episodes, prompts = step * n, prompts_phrase(cfg)
    if a.context_mode == "reprompt" and mini == step:  # separate_async: verl's own constraint (verl_config.py)
        return (f"verl updates: about T optimizer steps per RL step, T = the step's mean turns per episode "
                f"(separate_async: actor.ppo_mini_batch_size = {prompts}, {episodes:,} rows a mini-batch); the "
                "later ones off-policy")
    g = gpu_split(cfg)
    dp, rows = g["nnodes"] * g["gpus"], mini * n
    multiple = math.lcm(dp, rows)
    steps = al.ppo_epochs * (multiple // rows)
    extra = f" ({steps - al.ppo_epochs} of them on padding rows only)" if multiple > rows else ""
    pad = f"padded to a multiple of lcm({dp} ranks, {rows:,}) = {multiple:,} with empty rows of {PAD_ROW_TOKENS} tokens"
    if a.context_mode == "reprompt":
        return (f"verl updates: {steps} optimizer step(s) per RL step{extra}: actor.ppo_mini_batch_size = {mini:,} "
                f"prompts = {prompts} x agent.max_turns {a.max_turns}, one mini-batch of {rows:,} rows ({mini:,} x "
                f"rollout.n {n}). Each step's {episodes:,} episodes give one row per turn, {episodes:,} x T rows (T "
                f"= mean turns, at most {a.max_turns}), {pad} (no loss): {multiple:,} - {episodes:,} x T per step, "
                f"{multiple - episodes:,} at T = 1, {multiple - episodes * a.max_turns:,} at T = {a.max_turns}")
    padded = math.ceil(episodes / multiple) * multiple
    return (f"verl updates: {al.ppo_epochs * padded // rows} optimizer step(s) per RL step{extra}: "
            f"actor.ppo_mini_batch_size = {prompts}, {episodes:,} rows a step (one per episode), {pad}: "
            f"{padded - episodes:,} per step")


def model_params(cfg: ExperimentConfig) -> int:
    """The policy's parameter count: `model.params`, else counted (on the meta device: no weights) from the tiny
    config or a local checkpoint dir's config.json. Unknown is a config error naming the key."""
    m = cfg.model
    if m.params > 0:
        return int(m.params)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, Qwen3Config

    if m.name == "tiny":
        t = m.tiny
        config = Qwen3Config(vocab_size=t.vocab_size, hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                             num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
                             num_key_value_heads=t.num_key_value_heads, head_dim=t.head_dim,
                             tie_word_embeddings=True)  # as orchestra/policy/models.py tiny_model builds it
    elif (Path(m.name).expanduser() / "config.json").is_file():
        config = AutoConfig.from_pretrained(Path(m.name).expanduser())
    else:
        raise ConfigError(f"model.params: set it to {m.name!r}'s parameter count (verl's checkpoints are sized from "
                          "it); it is counted only for the tiny model or a local checkpoint dir")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@dataclass
class CheckpointPlan:
    params: int
    ranks: int  # the trainer's ranks
    replicas: int  # HSDP replica groups (nodes); one of them writes
    bytes: int  # one save: model + optimizer, once
    bytes_every_rank: int  # what verl alone wrote: every replica group its own copy
    save_s: float  # at verl.storage_write_gbs
    every: int  # checkpoint.every_steps (0: never)
    keep: int
    min_every: int  # the smallest cadence within verl.save_share at verl.step_time_s (0: step time unknown)


def checkpoint_plan(cfg: ExperimentConfig) -> CheckpointPlan:
    v, g = cfg.verl, gpu_split(cfg)
    ranks = g["nnodes"] * g["gpus"]
    replicas = ranks // g["gpus"] if g["gpus"] < ranks else 1  # fsdp_size = GPUs per node (verl_config.py)
    params = model_params(cfg)
    size = params * BYTES_PER_PARAM
    if v.storage_write_gbs <= 0 or not 0 < v.save_share <= 1 or v.step_time_s < 0:
        raise ConfigError(f"verl.storage_write_gbs > 0, 0 < verl.save_share <= 1, verl.step_time_s >= 0; got "
                          f"{v.storage_write_gbs}, {v.save_share}, {v.step_time_s}")
    save_s = size / (v.storage_write_gbs * 1e9)
    min_every = math.ceil(save_s / (v.save_share * v.step_time_s)) if v.step_time_s > 0 else 0
    return CheckpointPlan(params, ranks, replicas, size, size * replicas, save_s, cfg.checkpoint.every_steps,
                          cfg.checkpoint.keep, min_every)


def check_cadence(cfg: ExperimentConfig) -> None:
    """Refuses a checkpoint cadence whose saves would take more than verl.save_share of the wall clock (checked
    when verl.step_time_s states a step's seconds)."""
    if cfg.verl.step_time_s <= 0 or not cfg.checkpoint.every_steps:
        return
    p = checkpoint_plan(cfg)
    if p.every and p.min_every and p.every < p.min_every:
        raise ConfigError(f"checkpoint.every_steps={p.every}: a save writes {p.bytes / 1e9:,.1f} GB, "
                          f"{p.save_s:,.0f} s at verl.storage_write_gbs={cfg.verl.storage_write_gbs:g}, over "
                          f"verl.save_share={cfg.verl.save_share:g} of {p.every} steps of verl.step_time_s="
                          f"{cfg.verl.step_time_s:g}: set checkpoint.every_steps >= {p.min_every} (or state a faster "
                          "storage_write_gbs / step_time_s)")


def checkpoint_line(cfg: ExperimentConfig) -> str:
    try:
        p, v = checkpoint_plan(cfg), cfg.verl
    except ConfigError as e:  # a printed plan, not a reason to stop a run: say what is unknown and why
        return f"checkpoints: size unknown ({e})"
    who = (f"one replica group of {p.ranks // p.replicas} ranks writes; verl alone wrote all {p.replicas}: "
           f"{p.bytes_every_rank / 1e9:,.1f} GB" if p.replicas > 1 else f"{p.ranks} rank(s), one shard each")
    if not p.every:
        return f"checkpoints: none (checkpoint.every_steps=0); one would be {p.bytes:,} bytes"
    when = (f"every {p.every} steps: {p.save_s / (p.every * v.step_time_s):.1%} of the wall clock at "
            f"verl.step_time_s={v.step_time_s:g} (at most verl.save_share={v.save_share:g}: every >= {p.min_every})"
            if v.step_time_s > 0 else f"every {p.every} steps (verl.step_time_s unknown: cadence unchecked)")
    return (f"checkpoints: {p.bytes:,} bytes ({p.bytes / 1e9:,.1f} GB) per save = {p.params:,} params x "
            f"{BYTES_PER_PARAM} (fp32 weights + AdamW moments; {who}), ~{p.save_s:,.0f} s at "
            f"verl.storage_write_gbs={v.storage_write_gbs:g}; {when}; {p.keep} kept: {p.bytes * p.keep / 1e9:,.1f} GB")


def resume_plan(cfg: ExperimentConfig) -> tuple[int, int, list[str]] | None:
    """(the step a resumed run plays first, the staged row it starts at, the task ids of its rows), or None when there
    is no checkpoint to resume. verl restores its dataloader from the newest checkpoint's data.pt and continues at the
    row after the last one it handed out; in sync mode that must start the next step of the staged run order (the
    async modes also hand out prompts ahead, restored with the TransferQueue's own checkpoint)."""
    import pyarrow.parquet as pq
    import torch

    ckpts, done = newest_checkpoint_step(cfg)
    if done is None:
        return None
    state = torch.load(ckpts / f"global_step_{done}" / "data.pt", weights_only=False)
    # torchdata's StatefulDataLoader: with workers its sampler state sits in the main snapshot
    main = state["_snapshot"]["_main_snapshot"] if "_snapshot" in state else state
    row = int(main["_sampler_iter_state"]["samples_yielded"])
    n = rows_per_step(cfg)
    if cfg.verl.trainer_mode == "sync" and row != done * n:
        raise ConfigError(f"resume: global_step_{done}'s dataloader handed out {row} rows, not {done} steps x {n} "
                          "(algo.prompts_per_step x the paired vectors): the checkpoint was written with another "
                          "algo.prompts_per_step / data.preference_pairs or verl.trainer_mode, so the resumed step "
                          "would start mid-step in this run's order; use a new verl.output_dir")
    rows = pq.read_table(Path(stage_dir(cfg)) / "train.parquet", columns=["extra_info"]).to_pylist()[row:row + n]
    return done + 1, row, [json.loads(r["extra_info"]["task"])["id"] for r in rows]
