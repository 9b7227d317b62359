"""What the dry run and the job say a verl run will do (cluster/verl/plan.py), checked against verl 0.9.1's own code
on CPU: the plan line and its padding (issue 60, F3's wording), checkpoint bytes and cadence (N4), and the tasks a
resumed run's first step plays (N3: verl's own dataloader restored from data.pt as its trainer does)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("hydra")

from cluster.verl.config import compose, rows_per_step, verl_overrides  # noqa: E402
from cluster.verl.plan import (  # noqa: E402
    check_cadence,
    checkpoint_line,
    checkpoint_plan,
    model_params,
    resume_plan,
    updates_line,
)
from orchestra.config import ConfigError, load_config  # noqa: E402

H100 = ["experiment=h100_2x8"]


def test_the_plan_line_says_what_a_step_holds_and_pads():
    """On f4067d9 the dry run printed "540 prompts = 18 prompts = 6 tasks x ...", and nothing of the ~3,700 empty
    rows verl adds to a step of ~600 real ones. The padding it states is verl's own multiple for the step."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    cfg = load_config(H100)
    c = compose(verl_overrides(cfg, H100))
    line = updates_line(cfg)
    assert "actor.ppo_mini_batch_size = 540 prompts = 18 prompts (6 tasks x 3 paired vectors) x agent.max_turns 30" \
        in line
    assert "= 18 prompts =" not in line and "1 optimizer step(s) per RL step:" in line
    dp = c.trainer.nnodes * c.trainer.n_gpus_per_node
    multiple = PPOTrainer._get_required_batch_multiple(SimpleNamespace(config=c, use_critic=False, global_steps=1), dp)
    episodes = rows_per_step(cfg) * cfg.algo.group_size
    assert (multiple, episodes) == (4320, 144)
    assert f"= {multiple:,} with empty rows of 128 tokens" in line
    assert f"{multiple:,} - {episodes} x T per step, {multiple - episodes:,} at T = 1, 0 at T = 30" in line
    # a config whose ranks do not divide the mini-batch: verl pads to the lcm, and the extra mini-batches are padding
    odd = load_config(H100 + ["verl.gpus_per_node=7", "verl.nnodes=1"])
    assert "optimizer step(s) per RL step (6 of them on padding rows only)" in updates_line(odd)


def test_qwen3_8b_parameter_count_is_its_shape():
    """conf/model/qwen3_8b.yaml's model.params (the checkpoint arithmetic's input) against Qwen3-8B's config.json
    shape (bench/gpu_warm_start.py QWEN3_8B), counted on the meta device; the tiny model is counted as built."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    from bench.gpu_warm_start import QWEN3_8B
    from orchestra.policy.models import tiny_model

    with torch.device("meta"):
        counted = sum(p.numel() for p in AutoModelForCausalLM.from_config(Qwen3Config(**QWEN3_8B)).parameters())
    assert model_params(load_config(H100)) == counted == 8_190_735_360
    cfg = load_config(["experiment=verl_cpu_tiny"])
    tokenizer = type("Tok", (), {"__len__": lambda self: 10, "eos_token_id": 1, "pad_token_id": 0})()
    assert model_params(cfg) == sum(p.numel() for p in tiny_model(cfg.model.tiny, tokenizer).parameters())
    with pytest.raises(ConfigError, match="model.params"):
        model_params(load_config(H100 + ["model.params=0"]))
    # unknown, the printed plan says so and a run without a cadence check goes on; with one, it names the key
    assert "checkpoints: size unknown (model.params:" in checkpoint_line(load_config(H100 + ["model.params=0",
                                                                                              "verl.step_time_s=0"]))
    check_cadence(load_config(H100 + ["model.params=0", "verl.step_time_s=0"]))
    with pytest.raises(ConfigError, match="model.params"):
        check_cadence(load_config(H100 + ["model.params=0"]))


def test_checkpoints_are_sized_to_a_resume_and_the_cadence_to_the_write_speed(capsys):
    """On f4067d9 both HSDP replica groups wrote every shard: 196.6 GB a save for h100_2x8, every 5 steps. One
    group writes now (actors/verl_plugins/checkpoint.py), the dry run prints the bytes, and a cadence whose saves
    would take more than verl.save_share of the stated step time at the stated write speed is refused."""
    from cluster.verl.job import main

    p = checkpoint_plan(load_config(H100))
    assert (p.ranks, p.replicas, p.bytes) == (16, 2, 8_190_735_360 * 12) and p.bytes_every_rank == 2 * p.bytes
    assert (p.every, p.min_every) == (5, 4)  # 98.3 s a save at 1 GB/s; 5% of 600 s steps
    assert main(H100 + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# checkpoints: 98,288,824,320 bytes (98.3 GB) per save" in out and "3.3% of the wall clock" in out
    with pytest.raises(ConfigError, match=r"checkpoint.every_steps=3: .* set checkpoint.every_steps >= 4"):
        check_cadence(load_config(H100 + ["checkpoint.every_steps=3"]))
    with pytest.raises(ConfigError, match=r"checkpoint.every_steps >= 7"):  # slower storage, sparser saves
        check_cadence(load_config(H100 + ["verl.storage_write_gbs=0.5"]))
    assert main(H100 + ["checkpoint.every_steps=3", "--dry-run"]) == 2  # the dry run refuses too
    assert "checkpoint.every_steps=3" in capsys.readouterr().err
    check_cadence(load_config(H100 + ["checkpoint.every_steps=3", "verl.step_time_s=0"]))  # unknown: unchecked


@pytest.mark.timeout(240)
@pytest.mark.parametrize("workers", [None, 0])  # verl's default (8 worker processes); verl_cpu_tiny's 0
def test_a_resumed_run_first_plays_the_next_step_of_the_run_order(tmp_path, workers):
    """verl restores its dataloader from the newest checkpoint's data.pt and reads the staged parquet unshuffled:
    its resumed step must play the tasks run_order gives that step (the local trainer's step). Here verl's own
    trainer code builds the dataloader twice (as a run and its rerun do), plays 3 steps, saves and restores it."""
    import torch
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from cluster.rollouts import run_order
    from cluster.verl.stage import stage
    from orchestra.config import task_tiers
    from orchestra.data.sources import build_task_set
    from orchestra.policy.models import load_tokenizer

    over = H100 + [f"verl.output_dir={tmp_path}", "data.n_train=5", "data.n_heldout=1", "algo.prompts_per_step=2",
                   "algo.steps=6"] + ([] if workers is None else [f"verl.overrides=[data.dataloader_num_workers={workers}]"])
    cfg = load_config(over)
    stage(cfg, over)
    c = compose(verl_overrides(cfg, over))
    assert c.data.dataloader_num_workers == (8 if workers is None else workers)
    tokenizer = load_tokenizer("tiny")  # Qwen3-8B's is not here; the dataset only renders prompts with it

    def dataloader():  # as PPOTrainer.__init__ builds it, through its own _init_dataloader
        trainer = SimpleNamespace(config=c, tokenizer=tokenizer, processor=None, trainer_mode="sync",
                                  parameter_sync_step=1)
        PPOTrainer._init_dataloader(trainer)
        return trainer

    def played(trainer) -> list[str]:
        import json

        batch = PPOTrainer._fetch_one_gen_batch(trainer)
        return [json.loads(extra["task"])["id"] for extra in batch["extra_info"]]

    n = rows_per_step(cfg)
    order = [t.id for t in run_order(build_task_set(cfg.data, task_tiers(cfg))[0], 2, 6, cfg.data.preference_pairs,
                                     cfg.seed)]
    first = dataloader()
    for step in range(1, 4):
        assert played(first) == order[(step - 1) * n:step * n]
    assert resume_plan(cfg) is None  # no checkpoint yet
    ckpt = tmp_path / "checkpoints" / "global_step_3"
    ckpt.mkdir(parents=True)
    torch.save(first.train_dataloader.state_dict(), ckpt / "data.pt")  # what verl's _save_checkpoint writes
    (tmp_path / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("3")
    rerun = dataloader()
    rerun.train_dataloader.load_state_dict(torch.load(ckpt / "data.pt", weights_only=False))  # verl's resume
    resumed = played(rerun)
    assert resumed == order[3 * n:4 * n]  # step 4 of the run order
    assert resume_plan(cfg) == (4, 3 * n, resumed)  # what the job prints before verl starts
    # a rerun with another step size would start mid-step of its own order: refused, naming the keys
    with pytest.raises(ConfigError, match="algo.prompts_per_step"):
        resume_plan(load_config(over + ["algo.prompts_per_step=1"]))
