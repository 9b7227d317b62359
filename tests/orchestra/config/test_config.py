"""Config composition and validation: presets merge, overrides apply, bad keys/types name key and file."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestra.config import ConfigError, ExperimentConfig, load_config, to_yaml


def test_default_is_cpu_tiny():
    cfg = load_config()
    assert isinstance(cfg, ExperimentConfig)
    assert cfg.name == "cpu_tiny" and cfg.model.name == "tiny" and cfg.backend == "local"
    assert cfg.run_dir == "runs/cpu_tiny"
    assert cfg.zoo.tiers["answer-1"] in cfg.zoo.experts


def test_h100_preset_carries_toolorchestra_values():
    cfg = load_config(["experiment=h100_2x8"])
    assert cfg.backend == "verl" and cfg.model.name == "Qwen/Qwen3-8B"
    # 18 prompts per step: 6 tasks under 3 paired presets (the project's recipe; ToolOrchestra used 16)
    assert (cfg.algo.group_size, cfg.algo.prompts_per_step, cfg.algo.lr) == (8, 6, 1e-6)
    assert cfg.data.preference_pairs.count("|") == 2
    assert (cfg.algo.clip_ratio_low, cfg.algo.clip_ratio_high) == (0.2, 0.28)
    assert (cfg.algo.kl_type, cfg.algo.kl_coef, cfg.agent.max_turns) == ("mse", 1e-4, 30)
    # the warm start's learner fits one GPU (orchestra/policy/memory.py; bench/gpu_smoke.py --warm-start-8b)
    assert cfg.algo.gradient_checkpointing is True and cfg.algo.micro_batch_tokens == 32768


def test_zoo_swap_needs_matching_task_tiers():
    with pytest.raises(ConfigError, match="data.tiers.search-1.*data.tiers=null"):
        load_config(["zoo=replay_mmlu_pro"])
    cfg = load_config(["zoo=replay_mmlu_pro", "data.tiers=null"])
    assert cfg.data.tiers is None and cfg.zoo.name == "replay_mmlu_pro"


def test_cli_overrides_and_group_swap():
    cfg = load_config(["algo.lr=0.5", "model=smollm2", "agent.budget.usd=0.25", "zoo.tools=[answer]"])
    assert cfg.algo.lr == 0.5 and cfg.model.name == "smollm2"
    assert cfg.agent.budget.usd == 0.25 and cfg.zoo.tools == ["answer"]


@pytest.mark.parametrize("override, needle", [
    ("algo.nope=1", "algo.nope"),
    ("algo.lr=abc", "algo.lr"),
    ("model=nope", "model=nope"),
    ("experiment=nope", "experiment=nope"),
    ("algo.group_size=1", "algo.group_size"),
    ("data.n_train=0", "data.n_train"),
    ("agent.context_mode=chat", "agent.context_mode"),
    ("data.preference=bogus", "data.preference"),
    ("data.preference=balanced|bogus", "data.preference"),
    ("reward.unanswered_penalty=-1", "reward.unanswered_penalty"),
    ("sft.candidates=0", "sft.candidates"),
    ("sft.starts=0", "sft.starts"),
    ("sft.check_falls=median", "sft.check_falls"),
    ("zoo.server.client_max_in_flight=-1", "zoo.server.client_max_in_flight"),
    ("engine.join_every=-1", "engine.join_every"),
    ("engine.prefill_chunk_tokens=-1", "engine.prefill_chunk_tokens"),
    ("engine.prefix_cache_mb=-1", "engine.prefix_cache_mb"),
    ("algo.logit_chunk_tokens=-1", "algo.logit_chunk_tokens"),
    ("algo.micro_batch_tokens=-1", "algo.micro_batch_tokens"),
    ("algo.gradient_checkpointing=maybe", "algo.gradient_checkpointing"),
    ("model.lora.r=-1", "model.lora.r"),
    ("model.lora.target_modules=[]", "model.lora.target_modules"),
    ("model.lora.rank=8", "model.lora.rank"),
    ("zoo.retriever.kind=sparse", "zoo.retriever.kind"),
    ("zoo.retriever.index_type=pq", "zoo.retriever.index_type"),
    ("justtext", "key=value"),
])
def test_bad_overrides_name_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("[", r"\[")):
        load_config([override])


def test_unanswered_penalty_is_a_scalar_rubric_term():
    with pytest.raises(ConfigError, match=r"reward\.unanswered_penalty"):
        load_config(["reward=toolorchestra", "reward.unanswered_penalty=1"])
    assert load_config(["reward=scalar", "reward.unanswered_penalty=1"]).reward.unanswered_penalty == 1.0


def test_bad_file_names_key_and_file(tmp_path: Path):
    conf = tmp_path / "conf"
    for group in ("experiment", "model", "zoo", "reward", "backend"):
        (conf / group).mkdir(parents=True)
    (conf / "model" / "m.yaml").write_text("name: tiny\ntiny:\n  hidden_size: lots\n")
    (conf / "experiment" / "e.yaml").write_text("defaults: {model: m}\nname: e\n")
    with pytest.raises(ConfigError) as err:
        load_config(["experiment=e"], conf_dir=conf)
    assert "m.yaml" in str(err.value) and "hidden_size" in str(err.value)
    (conf / "experiment" / "e.yaml").write_text("name: e\nalgo: {lr_typo: 1}\n")
    with pytest.raises(ConfigError) as err:
        load_config(["experiment=e"], conf_dir=conf)
    assert "e.yaml" in str(err.value) and "lr_typo" in str(err.value)


def test_print_config_round_trips(capsys):
    from cluster.train import main

    assert main(["--print-config", "algo.steps=3"]) == 0
    out = capsys.readouterr().out
    assert "steps: 3" in out and "name: cpu_tiny" in out
    assert "steps: 3" in to_yaml(load_config(["algo.steps=3"]))
    assert main(["algo.bogus=1"]) == 2


def test_the_smollm2_preset_trains_lora_adapters_on_preference_pairs():
    cfg = load_config(["experiment=cpu_smollm2"])
    assert cfg.model.name == "smollm2" and cfg.model.lora.r > 0 and "q_proj" in cfg.model.lora.target_modules
    assert len(cfg.data.preference_pairs.split("|")) >= 2 and cfg.reward.rubric == "scalar"


def test_presets_given_as_paths_outside_conf(tmp_path: Path, monkeypatch):
    """experiment= and zoo= take YAML paths: the experiment's own defaults resolve beside it, the command line's
    against the cwd; the composed zoo holds only the file's experts (no shipped preset's files needed)."""
    own = tmp_path / "mine"
    own.mkdir()
    (own / "zoo.yaml").write_text("name: mine\ntools: [answer]\nexperts:\n  a: {kind: sim, model: gpt-5}\n"
                                  "tiers: {answer-1: a}\n")
    (own / "exp.yaml").write_text("defaults: {model: tiny, zoo: zoo.yaml, reward: scalar, backend: local}\n"
                                  "data: {source: template, tiers: null}\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(["experiment=mine/exp.yaml"])
    assert cfg.name == "exp" and cfg.run_dir == "runs/exp"  # no `name:` in the file: its stem
    assert cfg.zoo.name == "mine" and list(cfg.zoo.experts) == ["a"] and cfg.reward.rubric == "scalar"
    (tmp_path / "other.yaml").write_text("name: other\ntools: [answer]\nexperts:\n  b: {kind: sim, model: gpt-5}\n"
                                         "tiers: {answer-1: b}\n")
    cfg = load_config([f"experiment={own / 'exp.yaml'}", "zoo=other.yaml"])
    assert cfg.zoo.name == "other" and list(cfg.zoo.experts) == ["b"]
    with pytest.raises(ConfigError, match=r"zoo=nowhere\.yaml: no such file"):
        load_config(["experiment=mine/exp.yaml", "zoo=nowhere.yaml"])
    with pytest.raises(ConfigError, match=r"experiment=gone\.yaml: no such file"):
        load_config(["experiment=gone.yaml"])


def test_eval_finds_a_path_presets_run_by_its_saved_config(tmp_path: Path):
    """`make eval` after training on a preset outside conf/: the run's saved config.yaml is the experiment."""
    from cluster.runs import newest_run
    from orchestra.rundir import checkpoint

    run = tmp_path / "runs" / "mylog"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(load_config(["name=mylog"])))
    checkpoint.save(run, 1, lambda d: (d / "learner").mkdir(), meta={})
    found = newest_run(str(tmp_path / "runs" / "cpu_tiny"))
    assert found == (run, str(run / "config.yaml"))
    cfg = load_config([f"experiment={found[1]}"])
    assert cfg.name == "mylog" and cfg.run_dir == "runs/mylog"


def test_a_resume_under_changed_settings_keeps_the_first_config(tmp_path: Path):
    """save_config writes config.yaml; a second save with other settings moves the saved one to config.1.yaml
    (then config.2.yaml), names the changed keys, and leaves no temporary file; an unchanged config is no news."""
    from orchestra.config import save_config
    from orchestra.config.load import changed_keys

    first = load_config([f"run_dir={tmp_path}"])
    assert save_config(tmp_path, first) is None
    assert save_config(tmp_path, first) is None and not (tmp_path / "config.1.yaml").exists()
    second = load_config([f"run_dir={tmp_path}", "algo.lr=0.5", "seed=7"])
    note = save_config(tmp_path, second)
    assert note is not None and "algo.lr, seed" in note and "config.1.yaml" in note
    assert load_config([f"experiment={tmp_path / 'config.1.yaml'}"]).algo.lr == first.algo.lr
    assert load_config([f"experiment={tmp_path / 'config.yaml'}"]).algo.lr == 0.5
    assert "eval.n_tasks" in save_config(tmp_path, load_config([f"run_dir={tmp_path}", "eval.n_tasks=3"]))
    assert (tmp_path / "config.2.yaml").is_file() and not list(tmp_path.glob("*.tmp"))
    assert changed_keys({"a": {"b": 1, "c": [1]}}, {"a": {"b": 1, "c": [2]}, "d": 0}) == ["a.c", "d"]


def test_verl_refuses_what_its_warm_start_and_trainer_do_not_do():
    """The verl job's warm start checks nothing and its RL keeps whatever it learned: sft.until_follows and
    algo.val_share are refused there with one line naming the key, never silently ignored (issue 69)."""
    with pytest.raises(ConfigError, match=r"^sft\.until_follows: the verl backend"):
        load_config(["experiment=h100_2x8", "sft.until_follows=true", "sft.max_steps=800"])
    with pytest.raises(ConfigError, match=r"^algo\.val_share"):
        load_config(["experiment=h100_2x8", "algo.val_share=0.1"])
    assert load_config(["experiment=cpu_tiny", "sft.until_follows=true", "algo.val_share=0.1"]).backend == "local"


def test_a_preset_builds_on_another_and_says_only_what_differs(tmp_path: Path):
    """`defaults: {experiment: <other>}`: the other's groups and keys first, its own on top; its runs under its own
    name (verl_cpu_2node is verl_cpu_tiny across two nodes; cpu_tiny_nodes is cpu_tiny pinned to a cluster's nodes)."""
    two, one = load_config(["experiment=verl_cpu_2node"]), load_config(["experiment=verl_cpu_tiny"])
    assert (two.verl.nnodes, two.verl.gpus_per_node, one.verl.nnodes) == (2, 1, 1)
    assert two.sft == one.sft and two.data == one.data and two.model == one.model  # the rest is verl_cpu_tiny's
    assert two.name == "verl_cpu_2node" and two.run_dir == "runs/verl_cpu_2node"
    nodes = load_config(["experiment=cpu_tiny_nodes"])
    assert nodes.cluster.worker_resources == {"orchestra_workers": 0.001} and nodes.algo == load_config([]).algo
    (tmp_path / "base.yaml").write_text("defaults: {model: tiny, experiment: child.yaml}\nname: base\n")
    (tmp_path / "child.yaml").write_text("defaults: {experiment: base.yaml}\n")
    with pytest.raises(ConfigError, match="builds on itself"):
        load_config([f"experiment={tmp_path / 'child.yaml'}"])
    (tmp_path / "leaf.yaml").write_text("defaults: {experiment: cpu_tiny}\nalgo: {steps: 3}\n")
    leaf = load_config([f"experiment={tmp_path / 'leaf.yaml'}"])
    assert leaf.name == "leaf" and leaf.algo.steps == 3 and leaf.data.n_train == load_config([]).data.n_train
