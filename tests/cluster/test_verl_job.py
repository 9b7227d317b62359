"""The verl launcher on CPU: overrides match the golden file, compose with verl 0.9.1's own ppo_trainer config
(Hydra, as verl's main does) and pass verl's validate_config; the dry run prints config and submit command
without secrets; staging writes rows our agent loop reads back."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import yaml

pytest.importorskip("hydra")

from cluster import verl_job  # noqa: E402
from cluster.verl_job import (  # noqa: E402
    agent_loop_entries,
    compose,
    load_runtime_env,
    main,
    stage,
    validate_verl_config,
    verl_overrides,
)
from orchestra.config import ConfigError, load_config  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "verl_overrides.txt"
H100 = ["experiment=h100_2x8"]


@pytest.fixture(scope="module")
def h100():
    cfg = load_config(H100)
    return cfg, verl_overrides(cfg, H100)


def test_overrides_match_golden(h100):
    _, ov = h100
    assert ov == GOLDEN.read_text().splitlines(), "regenerate tests/golden/verl_overrides.txt if intended"


def test_overrides_compose_with_verls_config_and_validate(h100):
    cfg, ov = h100
    c = compose(ov)
    ar = c.actor_rollout_ref
    assert ar.rollout.n == cfg.algo.group_size == 8 and c.data.train_batch_size == 16
    assert ar.actor.optim.lr == 1e-6 and (ar.actor.clip_ratio_low, ar.actor.clip_ratio_high) == (0.2, 0.28)
    assert ar.actor.use_kl_loss and ar.actor.kl_loss_type == "mse" and ar.actor.kl_loss_coef == 1e-4
    assert ar.rollout.multi_turn.max_assistant_turns == 30
    assert ar.rollout.multi_turn.max_tool_response_length == cfg.verl.max_tool_response_chars
    assert ar.rollout.multi_turn.tokenization_sanity_check_mode == "ignore_strippable"
    assert ar.rollout.agent.default_agent_loop == "orchestra"
    assert c.transfer_queue.backend.SimpleStorage.num_data_storage_units == 2
    assert c.trainer.use_v1 and c.trainer.v1.trainer_mode == "separate_async"
    # separate_async on 2 nodes: one node trains, one node rolls out; no colocated (hybrid) replicas
    assert (c.trainer.nnodes, c.trainer.n_gpus_per_node, ar.rollout.nnodes) == (1, 8, 1)
    assert ar.hybrid_engine is False
    # toolorchestra: the agent loop hands verl finished advantages, verl must not normalise again
    assert c.algorithm.adv_estimator == "grpo" and c.algorithm.norm_adv_by_std_in_grpo is False
    assert c.reward.custom_reward_function.path is None
    validate_verl_config(c)


def test_scalar_rubric_goes_through_verls_custom_reward_function():
    ov_cli = H100 + ["reward=scalar", "verl.trainer_mode=sync", "verl.nnodes=1"]
    cfg = load_config(ov_cli)
    c = compose(verl_overrides(cfg, ov_cli))
    # the scalar rubric's rewards are mean-centred only (reward.norm_adv_by_std: false in conf/reward/scalar.yaml) ...
    assert c.algorithm.norm_adv_by_std_in_grpo is False
    # ... and divided by the group's std by verl's GRPO when asked
    c = compose(verl_overrides(load_config(ov_cli + ["reward.norm_adv_by_std=true"]), ov_cli))
    assert c.algorithm.norm_adv_by_std_in_grpo is True
    assert (c.trainer.nnodes, c.trainer.n_gpus_per_node, c.actor_rollout_ref.hybrid_engine) == (1, 8, True)
    fn = c.reward.custom_reward_function
    assert fn.path == "actors/verl_plugins/reward.py" and fn.name == "compute_score"
    assert list(fn.reward_kwargs.orchestra_overrides) == ov_cli
    from verl.utils.import_utils import load_extern_object

    score = load_extern_object(module_path=str(verl_job.ROOT / fn.path), object_name=fn.name)
    assert inspect.iscoroutinefunction(score)  # verl awaits it (judges may call an LLM)
    validate_verl_config(c)


def test_agent_loop_entry_points_at_our_class():
    import hydra

    (entry,) = agent_loop_entries(H100)
    assert entry["name"] == "orchestra" and entry["orchestra_overrides"] == H100
    from actors.verl_plugins.agent_loop import OrchestraAgentLoop

    assert hydra.utils.get_class(entry["_target_"]) is OrchestraAgentLoop


def test_config_errors():
    with pytest.raises(ConfigError, match="vllm"):
        verl_overrides(load_config(["experiment=h100_2x8", "engine.kind=hf"]), [])
    with pytest.raises(ConfigError, match="trainer_mode"):
        verl_overrides(load_config(["experiment=h100_2x8", "verl.trainer_mode=fast"]), [])
    one = load_config(["experiment=h100_2x8", "verl.nnodes=1"])
    ov = verl_overrides(one, [])
    assert "trainer.n_gpus_per_node=4" in ov and "actor_rollout_ref.rollout.n_gpus_per_node=4" in ov
    assert main(["experiment=cpu_tiny", "--dry-run"]) == 2  # backend local
    assert main(["experiment=h100_2x8", "--bogus"]) == 2


def test_dry_run_prints_config_and_submit_command_without_secrets(capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-do-not-print-42")
    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265")
    assert main(["experiment=h100_2x8", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sk-test-do-not-print-42" not in out and "OPENAI_API_KEY" in out
    assert "num_data_storage_units: 2" in out and "default_agent_loop: orchestra" in out
    cmd = [line for line in out.splitlines() if " ray job submit " in f" {line}"][-1]
    assert cmd.startswith("RAY_AUTH_MODE=token ") and "--address http://head:8265" in cmd
    assert "--working-dir . " in cmd and "/tmp" not in cmd
    assert "/.venv/bin/python -m cluster.verl_job experiment=h100_2x8 --here" in cmd


def test_runtime_env_takes_secrets_from_the_environment():
    env, present = load_runtime_env(environ={"TAVILY_API_KEY": "tvly-x", "UNRELATED": "1"})
    assert present == ["TAVILY_API_KEY"] and env["env_vars"]["TAVILY_API_KEY"] == "tvly-x"
    assert "secret_env_vars" not in env and "UNRELATED" not in env["env_vars"]
    assert {".venv/", ".git/"} <= set(env["excludes"])
    env, present = load_runtime_env(environ={})
    assert present == [] and not any(k.endswith("_API_KEY") for k in env["env_vars"])


def test_stage_writes_rows_the_agent_loop_reads(tmp_path):
    import pyarrow.parquet as pq

    from orchestra.data.tasks import task_from_verl_row

    over = H100 + [f"run_dir={tmp_path}/run", "data.n_train=6", "data.n_heldout=2"]
    cfg = load_config(over)
    out = stage(cfg, over)
    rows = pq.read_table(out / "train.parquet").to_pylist()
    assert len(rows) == 6 and rows[0]["agent_name"] == "orchestra"
    task = task_from_verl_row(rows[0])
    assert task.answer == rows[0]["reward_model"]["ground_truth"]
    val = pq.read_table(out / "val.parquet").to_pylist()
    assert {r["extra_info"]["split"] for r in val} == {"heldout"}
    assert yaml.safe_load((out / "agent_loop.yaml").read_text()) == agent_loop_entries(over)


def test_submit_passes_secrets_through_a_private_file(monkeypatch, tmp_path, capsys):
    import json
    import os

    monkeypatch.setenv("RAY_ADDRESS", "http://head:8265")
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-secret-77")
    seen = {}

    def fake_call(cmd, cwd, env):  # stands in for the `ray job submit` process
        path = cmd[cmd.index("--runtime-env") + 1]
        seen.update(cmd=cmd, cwd=cwd, env=env, path=path, mode=os.stat(path).st_mode & 0o777,
                    runtime_env=json.loads(Path(path).read_text()))
        return 0

    monkeypatch.setattr(verl_job.subprocess, "call", fake_call)
    over = H100 + [f"run_dir={tmp_path}/run", "data.n_train=4", "data.n_heldout=1"]
    assert main(over) == 0
    assert seen["mode"] == 0o600 and not Path(seen["path"]).exists()  # private, and gone afterwards
    assert seen["runtime_env"]["env_vars"]["TAVILY_API_KEY"] == "tvly-secret-77"
    assert "secret_env_vars" not in seen["runtime_env"]
    assert seen["env"]["RAY_AUTH_MODE"] == "token" and Path(seen["cwd"]) == verl_job.ROOT
    cmd = seen["cmd"]
    assert cmd[1:3] == ["job", "submit"] and cmd[cmd.index("--address") + 1] == "http://head:8265"
    assert cmd[-2:] == [over[-1], "--here"] and "tvly-secret-77" not in " ".join(cmd)
    assert "tvly-secret-77" not in capsys.readouterr().out
    assert (tmp_path / "run" / "verl" / "train.parquet").is_file()  # staged before upload
