"""The training driver end to end on the tiny model (shared local Ray cluster): cpu_tiny's recipe at toy size (the
session's `toy_run`, tests/conftest.py). `e2e` (make test-e2e; each a driver start-up of its own): a 2-step run and
its resume after a kill with the same task order, faults (a tool server and a rollout worker dying mid-step) and a
LoRA policy on preference pairs."""

from __future__ import annotations

import json
import threading
import time

import pytest
import ray

from cluster.rollouts import TaskSampler
from cluster.trainer import Trainer
from orchestra.config import load_config
from orchestra.rundir import checkpoint
from orchestra.rundir.tracking import read_metrics

# Small and fast: no `search` tool (its retriever embeds a corpus at start-up); the other tools are real.
SMALL = ["zoo.tools=[enhance_reasoning,answer]", "cluster.torch_threads=1", "data.n_train=8", "data.n_heldout=4", "algo.group_size=2", "algo.prompts_per_step=2", "sft.steps=2",
         "sft.demos=8", "sft.batch_size=8", "eval.n_tasks=4", "eval.seeds=1", "sampling.max_tokens=40", "agent.max_turns=2",
         "checkpoint.every_steps=1", "checkpoint.keep=3", "log.tensorboard=false", "log.plots=false",
         "cluster.rollout_worker_cpus=0.5", "cluster.learner_cpus=0.5",
         # the driver's mechanics, not cpu_tiny's recipe: random demonstrations, one vector, one held-out preset
         "sft.teacher=random", "sft.restate_preference=false", "sft.until_follows=false", "sft.max_steps=0",
         "data.preference_pairs=''", "eval.presets=[]", "reward.norm_adv_by_std=true", "algo.balance_prefs=false",
         "eval.sweep=false", "algo.val_share=0"]


def small_cfg(tmp_path, *extra):
    return load_config([*SMALL, f"run_dir={tmp_path / 'run'}", *extra])


@pytest.mark.e2e  # two driver start-ups (~45 s alone): make test-e2e
def test_two_steps_then_resume_after_kill_with_same_task_order(ray_cluster, tmp_path):
    cfg = small_cfg(tmp_path, "algo.steps=3")
    seen: dict[int, list[str]] = {}
    trainer = Trainer(cfg)
    original = trainer.step

    def step_then_die(step):
        seen[step] = [t.id for t in trainer.sampler.batch(step)]
        if step == 3:
            raise KeyboardInterrupt("killed mid-step")  # the job dies inside step 3
        return original(step)

    trainer.step = step_then_die
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    trainer.close()
    good = checkpoint.latest_good(cfg.run_dir)
    assert good is not None and good.name == "step_000002"
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl", kind="train")
    assert [r["step"] for r in rows] == [1, 2]
    assert {"rollout", "update", "sync", "samples", "sample"} <= set(rows[0]["phase_s"])
    assert rows[0]["learner"].get("version", 0) >= 0 and 0 <= rows[0]["accuracy"] <= 1

    resumed = Trainer(small_cfg(tmp_path, "algo.steps=3"))
    again: dict[int, list[str]] = {}
    inner = resumed.step

    def record(step):
        again[step] = [t.id for t in resumed.sampler.batch(step)]
        return inner(step)

    resumed.step = record
    try:
        summary = resumed.fit()
        assert list(again) == [3] and again[3] == seen[3]  # continues at step 3 with the identical tasks
        assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl", kind="train")] == [1, 2, 3]
        assert "after_sft" in summary and "after_rl" in summary and "heldout_reward_gain" in summary
        saved = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert saved["after_rl"]["episodes"] == 4
        engines = saved["engines"]  # the rollout engines' counters, summed over workers
        assert engines["rows"] >= engines["batches"] > 0 and engines["tokens_generated"] > 0
        assert 0 <= engines["queue_wait_s"] and engines["reused_prefix_tokens"] <= engines["prompt_tokens"]
    finally:
        resumed.close()


@pytest.mark.e2e
def test_a_tool_server_and_a_rollout_worker_dying_mid_step(ray_cluster, tmp_path):
    """After one step (the learner ahead of a restarted worker's initial weights), the faults of check_faults."""
    trainer = Trainer(small_cfg(tmp_path, "algo.steps=1"))
    try:
        trainer.fit()
        check_faults(trainer)
    finally:
        trainer.close()


# cpu_tiny's recipe at toy size (tests/conftest.py's session fixture `toy_run` trains it once with these; bench/seeds.py
# and bench/rl_value.py read the same run in tests/bench/test_bench_smoke.py)
EXPECTED_VALUE = ["sft.teacher=expected_value", "data.n_train=12", "router.explore_tasks=10", "router.folds=2",
                  "sft.vectors=[accuracy-first,balanced,cost-first]", "sft.vectors_sampled=1",
                  "eval.presets=[accuracy-first,balanced,cost-first]", "eval.n_tasks=2", "algo.steps=1",
                  "data.preference_pairs=accuracy-first|cost-first", "algo.balance_prefs=true",
                  "reward.norm_adv_by_std=false", "eval.sweep=true", "agent.route_hints=true", "algo.val_share=0.2"]


def test_expected_value_warm_start_end_to_end(toy_run):
    """cpu_tiny's recipe at toy size through the real actors: exploration plays every plan on every explored task,
    the estimator router is saved in the run dir, the teacher's demonstrations differ by preset, held-out tasks
    are scored under the three presets (gain, spread, monotone, the router beside), and the run's RESULT lines
    name them."""
    from cluster.train import result_lines
    from orchestra.preferences import SWEEP_COSTS
    from orchestra.routing.router import has_router

    run, summary = toy_run
    assert has_router(run)
    rows = [json.loads(line) for line in (run / "router" / "explore.jsonl").read_text().splitlines()]
    plans = {r["policy"] for r in rows}  # zoo.tools=[enhance_reasoning, answer]: answer alone or after a reasoner
    assert len(plans) >= 4 and any("+" in p for p in plans)
    assert len({(r["task_id"], r["policy"]) for r in rows}) == len(rows) == 10 * len(plans)
    assert summary["explore_episodes"] == len(rows)
    assert summary["teacher_labels"] == 10 * (3 + 1)
    mix = summary["teacher_mix"]
    assert set(mix) == {"accuracy-first", "balanced", "cost-first"} and mix["accuracy-first"] != mix["cost-first"]
    rl = summary["after_rl"]
    assert set(rl["by_pref"]) == {"accuracy-first", "balanced", "cost-first"} and rl["episodes"] == 3 * 2
    assert abs(rl["score"] - sum(v["score"] for v in rl["by_pref"].values()) / 3) < 1e-9
    assert "heldout_pref_spread" in summary and summary["heldout_monotone"] in (0.0, 1.0)
    assert set(summary["router"]["by_pref"]) == set(rl["by_pref"]) and "heldout_vs_estimator" in summary
    lines = result_lines(summary)
    assert [line.split("=")[0] for line in lines] == [
        "RESULT heldout_reward_gain", "RESULT heldout_reward_gain_lo", "RESULT heldout_reward_gain_hi",
        "RESULT heldout_pref_spread", "RESULT heldout_monotone", "RESULT heldout_format_ok",
        "RESULT heldout_vs_estimator", "RESULT heldout_vs_estimator_lo", "RESULT heldout_vs_estimator_hi",
        "RESULT heldout_unseen_adherence", "RESULT heldout_sweep_read_as_trained", "RESULT heldout_hint_agreement",
        "RESULT rl_kept", "RESULT val_rl_gain", "RESULT val_rl_gain_lo", "RESULT val_rl_gain_hi", "RESULT sft_starts",
        "RESULT train_wall_s", "RESULT rl_gain_ci_low"]
    # RL's gate on its validation split (2 of the 12 training tasks, never sampled by RL, never held out)
    assert summary["val_sft"]["episodes"] == summary["val_rl"]["episodes"] == 2 * 3
    keep = load_config([f"experiment={run / 'config.yaml'}"]).algo.keep_rl  # cpu_tiny's: better
    kept = summary["val_rl_gain_lo"] > 0 if keep == "better" else summary["val_rl_gain_hi"] >= 0
    assert summary["rl_kept"] == int(kept) and (run / "warm_start").is_dir()
    assert [p["cost_weight"] for p in summary["router"]["sweep"]["points"]] == list(SWEEP_COSTS)
    assert 0.0 <= summary["heldout_hint_agreement"] <= 1.0  # the run shows route hints: agreement is measured
    assert set(summary["after_sft"]["hint_agreement_by_pref"]) == {"accuracy-first", "balanced", "cost-first"}
    assert summary["heldout_reward_gain_lo"] <= summary["heldout_reward_gain"] <= summary["heldout_reward_gain_hi"]
    assert [p["cost_weight"] for p in summary["unseen_sweep"]["points"]] == list(SWEEP_COSTS)  # vectors no training used
    # route hints: every task, training and held-out, carries the router's estimates in the saved task files
    from orchestra.agent.hints import HINT_KEY, hint_text
    from orchestra.data.tasks import load_tasks

    for name in ("train", "heldout"):
        saved = load_tasks(run / "data" / f"{name}.jsonl")
        assert all(HINT_KEY in t.meta and hint_text(t).startswith("Router (") for t in saved), name


def test_local_backend_refuses_vllm_rollouts_by_name(tmp_path):
    """VLLMEngine loads weights from a directory and syncs them asynchronously, which the local backend's rollout
    workers do not do: the launcher says so, naming the key, before any actor starts."""
    from cluster.launch import start_rollout_workers
    from orchestra.config import ConfigError

    with pytest.raises(ConfigError, match="engine.kind=vllm.*backend=verl"):
        start_rollout_workers(small_cfg(tmp_path, "engine.kind=vllm"), {}, None)


def test_train_refuses_up_front_when_the_sandbox_would(tmp_path, monkeypatch, capsys):
    """No bubblewrap (or no syscall filter): `make train` stops before any actor starts, saying how to fix it,
    unless zoo.sandbox.allow_unconfined opts in, which it then announces; a zoo without code tools is not held up."""
    import tools.sandbox as sandbox_mod
    from cluster.launch import sandbox_preflight
    from cluster.train import main

    monkeypatch.setattr(sandbox_mod.Sandbox, "shortfall", property(lambda self: "bwrap is not usable here"))
    assert main([*SMALL, f"run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the code sandbox would refuse") and "bwrap is not usable here" in err
    assert "zoo.sandbox.allow_unconfined=true" in err and "make setup" in err and not (tmp_path / "run").exists()
    warning = sandbox_preflight(small_cfg(tmp_path, "zoo.sandbox.allow_unconfined=true"))
    assert warning.startswith("warning:") and "WEAKER isolation: bwrap is not usable here" in warning
    assert sandbox_preflight(small_cfg(tmp_path, "zoo.tools=[answer]")) is None


def test_task_order_is_a_function_of_seed_and_step():
    items = list(range(10))
    a, b = TaskSampler(items, 4, seed=1), TaskSampler(items, 4, seed=1)
    assert [a.batch(s) for s in (1, 2, 3)] == [b.batch(s) for s in (1, 2, 3)]
    assert sorted(a.batch(1) + a.batch(2) + a.batch(3)[:2]) == items  # one epoch covers every task once
    assert TaskSampler(items, 4, seed=2).batch(1) != a.batch(1)


def test_sft_lr_decays_linearly_to_its_floor():
    from orchestra.config import SFTConfig
    from orchestra.data.demos import sft_lr

    cfg = SFTConfig(steps=5, lr=1e-3, min_lr_ratio=0.1)
    assert [round(sft_lr(cfg, i), 6) for i in range(5)] == [1e-3, 7.75e-4, 5.5e-4, 3.25e-4, 1e-4]
    assert sft_lr(SFTConfig(steps=5, lr=1e-3, min_lr_ratio=1.0), 4) == 1e-3  # constant
    assert sft_lr(cfg, 9) == sft_lr(cfg, 4)  # past the schedule: the floor, never below
    assert [round(sft_lr(cfg, i, total=9), 6) for i in (0, 4, 8)] == [1e-3, 5.5e-4, 1e-4]  # over a longer run


@pytest.mark.parametrize("shares, steps_done", [
    ([{"accuracy-first": 0.95, "cost-first": 0.5}, {"accuracy-first": 0.97, "cost-first": 0.92}], 10),
    ([{"accuracy-first": 0.95, "cost-first": 0.5}] * 9, 16),  # never reached: max_steps, the last step checked too
    ([{"accuracy-first": 0.95, "cost-first": 0.5}] * 4 + [{"accuracy-first": 0.95, "cost-first": 0.95}], 16),
    ([{"accuracy-first": 0.91, "cost-first": 0.9}], 8)])  # reached at sft.steps: no more steps
def test_sft_runs_on_in_chunks_until_the_hint_is_copied_under_every_preset(shares, steps_done):
    import io

    from rich.console import Console

    from cluster.progress import Bars
    from cluster.warm_start import sft_loop
    from orchestra.config import SFTConfig

    sc = SFTConfig(steps=8, lr=1e-3, batch_size=2, until_agreement=0.9, max_steps=16)
    lrs, asked = [], []

    def check(step):  # as cluster/sft_check.train_check answers for the hint check
        asked.append(step)
        low = {k: v for k, v in shares[len(asked) - 1].items() if v < 0.9}
        return {"passed": not low, "line": "copies", "below": ", ".join(f"{v:.0%} under {k}" for k, v in low.items()),
                **shares[len(asked) - 1]}

    console = Console(file=io.StringIO(), width=200)
    with Bars(console) as bars:
        out = sft_loop(sc, lambda batch, lr: lrs.append(lr) or {"sft_loss": 1.0 / len(lrs)}, list(range(5)), 0, bars,
                       console, check)
    assert out["sft_steps_done"] == len(lrs) == steps_done and out["sft_loss"] == 1.0 / steps_done
    # every steps // 4 after steps, and the last step (the goal the run reports is the last one checked)
    assert asked == [s for s in (8, 10, 12, 14, 16) if s <= steps_done][: len([x for x in shares])]
    assert [c["step"] for c in out["sft_agreement_checks"]] == asked
    assert lrs == sorted(lrs, reverse=True) and lrs[-1] > 1e-4 * 0.999  # one decay over max_steps
    assert ("copies; 2 more steps" in console.file.getvalue()) == (steps_done > 8)
    passed = [c["passed"] for c in out["sft_agreement_checks"]]
    assert passed == [False] * (len(asked) - 1) + [shares[len(asked) - 1]["cost-first"] >= 0.9]
    assert ("sft.max_steps reached" in console.file.getvalue()) == (not passed[-1])
    plain = sft_loop(SFTConfig(steps=8, lr=1e-3, batch_size=2), lambda b, lr: {"sft_loss": 0.5}, list(range(5)), 0,
                     Bars(console), console)
    assert plain == {"sft_loss": 0.5, "sft_steps_done": 8, "sft_starts": 1}  # without a check: exactly sft.steps


@pytest.mark.parametrize("passes, restarts, steps_done, steps_all", [
    ([True], [], 8, 8),  # the first start passes at sft.steps: no fresh start
    ([False, True], [1], 8, 16),  # its first check fails: dropped, the second passes at sft.steps
    ([False, False, False, False, False, True], [1], 16, 24),  # the last start runs on in chunks to max_steps
    ([False] * 6, [1], 16, 24)])  # and may end short of its goal there
def test_a_start_whose_first_check_fails_is_dropped_for_a_fresh_policy(passes, restarts, steps_done, steps_all):
    import io

    from rich.console import Console

    from cluster.progress import Bars
    from cluster.warm_start import sft_loop, start_seed
    from orchestra.config import SFTConfig

    sc = SFTConfig(steps=8, lr=1e-3, batch_size=2, until_follows=True, max_steps=16, starts=2)
    asked, fresh, batches = [], [], []
    console = Console(file=io.StringIO(), width=200)

    def check(step):  # as cluster/sft_check.train_check answers
        asked.append(step)
        return {"passed": passes[len(asked) - 1], "line": "ladder", "below": "flat"}

    with Bars(console) as bars:
        out = sft_loop(sc, lambda batch, lr: batches.append(batch) or {"sft_loss": 0.1}, list(range(40)), 3, bars,
                       console, check, lambda init: fresh.append(init))
    assert fresh == [start_seed(3, k) for k in restarts] and start_seed(3, 0) == 3  # one start: the run's own seed
    assert (out["sft_steps_done"], out["sft_steps_all"]) == (steps_done, steps_all)
    assert out["sft_starts"] == 1 + len(restarts)
    assert [(c["start"], c["step"], c["passed"]) for c in out["sft_agreement_checks"]] == \
        [(1, 8, passes[0])] + [(2, s, p) for s, p in zip((8, 10, 12, 14, 16), passes[1:], strict=False)]
    if restarts:  # the fresh start steps on the same demonstrations in another order
        assert batches[8:16] != batches[:8]
        assert "dropped for a fresh start (2 of 2: sft.starts)" in console.file.getvalue()
    assert ("sft.max_steps reached" in console.file.getvalue()) == (not passes[-1])


def test_until_agreement_needs_room_to_run_on():
    from orchestra.config import ConfigError

    with pytest.raises(ConfigError, match="sft.until_agreement"):
        load_config(["sft.until_agreement=1.5", "sft.max_steps=400"])
    hinted = ["experiment=mmlu_pro_replay", "sft.until_agreement=0.9"]
    with pytest.raises(ConfigError, match=r"sft.max_steps: must be >= sft.steps \(400\)"):
        load_config([*hinted, "sft.max_steps=200"])
    with pytest.raises(ConfigError, match="sft.max_steps"):
        load_config(["sft.until_follows=false", "sft.max_steps=800"])  # with neither check it would never be used
    assert load_config([*hinted, "sft.max_steps=800"]).sft.max_steps == 800
    with pytest.raises(ConfigError, match=r"sft.label_balance: must be in \[0, 1\]"):
        load_config(["sft.label_balance=2"])


def check_faults(trainer: Trainer) -> None:
    """A tool server and then a rollout worker die mid-step: the step completes; the tool calls return error
    results, and the worker's episodes are played again once it is back with the current weights."""
    requests = [{"task": t.to_dict(), "uid": f"f-{t.id}", "group_size": 2}
                for t in trainer.train[:2] for _ in range(2)]
    # a tool server dies while calls are in flight: the step completes, calls return error results
    ref = trainer.workers[0].rollout.remote(requests, trainer._sampling(False))
    ray.kill(trainer.tools["answer"], no_restart=False)
    results = ray.get(ref, timeout=240)
    assert len(results) == 4 and all(r.scored is not None for r in results)
    # the restarted server serves later calls
    assert wait_restarted(trainer.tools["answer"]) is not None
    # a rollout worker dies mid-step: the dispatcher has the reward actor forget its groups, waits for the restart,
    # resyncs the weights and plays the shard again. Long generations (512 tokens) keep the episodes in flight
    # when the kill lands.
    requests2 = [{**r, "uid": r["uid"] + "-w"} for r in requests]
    worker, out = trainer.workers[0], {}
    replays_before = trainer.dispatch.replays
    trainer._sampling = lambda eval_mode: {"max_tokens": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
    runner = threading.Thread(target=lambda: out.update(results=trainer.rollout(requests2)))
    runner.start()
    time.sleep(0.5)
    ray.kill(worker, no_restart=False)
    # Ray reports the killed worker's call only once its owner hears of the death: seconds alone, minutes on a
    # loaded 2-core machine (one CI run did not hear within 240 s). A bounded wait, then a clear fail.
    runner.join(timeout=480)
    assert not runner.is_alive(), "the step did not come back within 480 s of the rollout worker's death"
    results2 = out["results"]
    assert trainer.dispatch.replays == replays_before + 1
    assert [r.traj.uid for r in results2] == [r["uid"] for r in requests2]  # every episode, once, in order
    assert all("rollout worker died" not in (r.traj.error or "") and r.scored is not None for r in results2)
    # the replay ran on the restarted worker, which the resync brought to the learner's version
    assert wait_restarted(worker) == 0 and ray.get(worker.ready_version.remote()) == trainer.version


def wait_restarted(handle, timeout_s: float = 180.0):
    """Calls to an actor that is restarting fail fast (ActorUnavailableError); poll until it serves again."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(handle.ready.remote(), timeout=timeout_s)
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.e2e
def test_lora_policy_on_preference_pairs_syncs_adapters_to_the_workers(ray_cluster, tmp_path):
    """One paired step with a LoRA learner through the real actors: both vectors get their own groups, the
    workers end on the learner's version after an adapter-only sync (tests/actors/test_lora.py checks that the
    merged weights are the learner's policy), and the checkpoint's merged weights load as a plain model."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = small_cfg(tmp_path, "algo.steps=1", "model.lora.r=4", "model.lora.alpha=8",
                    "data.preference_pairs=accuracy-first|cost-first", "eval.n_tasks=2")
    trainer = Trainer(cfg)
    try:
        summary = trainer.fit()
        rows = read_metrics(tmp_path / "run" / "metrics.jsonl", kind="train")
        assert set(rows[0]["by_pref"]) == {"p0", "p1"}
        learner_version = ray.get(trainer.learner.version.remote())
        assert ray.get([w.ready_version.remote() for w in trainer.workers]) == [learner_version]
        _, payload = ray.get(trainer.learner.get_weights.remote(adapter_only=True))
        assert set(payload) == {"__lora__"} and payload["__lora__"]
        assert "heldout_reward_gain" in summary
    finally:
        trainer.close()
    ckpt = checkpoint.latest_good(cfg.run_dir) / "learner"
    plain = AutoModelForCausalLM.from_pretrained(ckpt)
    assert not any("lora" in k for k in plain.state_dict()) and torch.isfinite(
        plain(input_ids=torch.tensor([[1, 2, 3]])).logits).all()


def test_escalation_lines_say_when_no_policy_ran_an_adaptive_plan():
    """With consult offered, the escalation rates are printed where measured, and their absence is said in a line."""
    from cluster.train import result_lines

    ran = {"after_rl": {"by_pref": {"accuracy-first": {"escalation_disagree": 0.75, "escalation_agree": float("nan")},
                                    "cost-first": {}}}}
    assert result_lines(ran, consults=True) == ["RESULT escalation_disagree_accuracy_first=0.7500"]
    none = {"after_rl": {"by_pref": {"accuracy-first": {}, "cost-first": {}}}}
    assert [x.split(":")[0] for x in result_lines(none, consults=True)] == ["INFO escalation"]
    assert result_lines(none, consults=False) == []
