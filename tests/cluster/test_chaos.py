"""Chaos suite (issue 16): kill each actor kind with SIGKILL (by pid, as the OOM killer or a lost node would) under
a running training step, and the driver mid-run; the run must go on or resume with every episode accounted for,
no hang past the configured timeouts and no corrupt checkpoint. The Serve replica: tests/actors/serve/test_chaos.py.

Opt-in: `pytest -m chaos` (each kill is a real training step on the tiny model, ~1-2 min a test on 2 cores).
The two unmarked tests (a few seconds each) run in `make test`: the reward actor killed with groups waiting
at its barrier, and a checkpoint writer killed mid-save. Every test records `CHAOS <kind> survived= unaccounted=
hang= recover_s=` for the summary printed by tests/conftest.py.

What recovery means per kind (cluster/launch.py sets the restarts):
- tool server: restarts (max_restarts); calls in flight come back as error results the model sees.
- rollout worker: restarts; once it holds the current policy again, the groups it held are played again (the reward
  actor forgets their members first: cluster/rollouts.Dispatch), so none becomes an error or counts twice.
- reward actor: restarts, and every call in flight is retried (max_task_retries), so the `submit`s waiting at
  its barrier re-form their groups in the new process and are scored; only its metric counters since the
  last checkpoint are lost.
- learner: max_restarts=0 on purpose (a restarted learner would hold initial weights and no optimizer state,
  and a queued update would silently train it). The trainer replaces a dead learner, restores the newest good
  checkpoint and re-runs the lost step with the same tasks (Trainer._recover) — an in-process resume.
- driver: a re-run with the same run_dir resumes from the newest good checkpoint (at most the step in flight
  is re-run); checkpoints are written to a temp dir and renamed, so a kill never leaves a half checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster import launch
from orchestra.config import load_config
from orchestra.rundir import checkpoint
from orchestra.rundir.tracking import read_metrics
from orchestra.types import Task, Trajectory
from tests.cluster.test_train import small_cfg, wait_restarted

REPO = Path(__file__).resolve().parents[2]
HANG_S = 240.0  # a step (or a driver run) not done by then counts as a hang; reward.group_deadline_s is 30 here
CHAOS_CFG = ["reward.group_deadline_s=30", "checkpoint.keep=0"]  # keep=0: every checkpoint stays, to load all


def actor_pid(handle: Any) -> int:
    return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()), timeout=60)


def sigkill(pid: int) -> float:
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


# ---------------------------------------------------------------- fast subset (unmarked: runs in `make test`)
def test_reward_actor_killed_mid_group_rescores_every_member(ray_cluster, tmp_path, chaos_record):
    """Two groups of 2: one member of each waits at the barrier when the actor is SIGKILLed; the restarted actor
    gets the retried submits plus the second members, and every caller is answered with a real score."""
    cfg = load_config([f"run_dir={tmp_path / 'run'}", "reward.group_deadline_s=30"])
    reward = launch.start_reward_actor(cfg)
    try:
        pid = actor_pid(reward)
        tasks = [Task(id=f"t{i}", problem=f"{i} + {i}?", answer=str(2 * i), pref={"accuracy": 1.0}).to_dict()
                 for i in range(2)]

        def episode(i: int, k: int) -> dict[str, Any]:
            return Trajectory(task_id=f"t{i}", uid=f"u{i}", answer=str(2 * i) if k == 0 else "no",
                              termination="answered", episode_id=f"u{i}-{k}").to_dict()

        first = [reward.submit.remote(episode(i, 0), tasks[i], 2) for i in range(2)]
        deadline = time.monotonic() + 30
        while ray.get(reward.__ray_call__.remote(lambda self: len(self._groups))) < 2:  # both waiting
            assert time.monotonic() < deadline
            time.sleep(0.05)
        killed = sigkill(pid)
        second = [reward.submit.remote(episode(i, 1), tasks[i], 2) for i in range(2)]
        try:
            got = ray.get(first + second, timeout=60)
        except ray.exceptions.GetTimeoutError:
            chaos_record("reward(fast)", survived=False, hang=1)
            raise
        recover_s = time.monotonic() - killed
        assert [g["status"] for g in got] == ["scored"] * 4
        assert [g["correct"] for g in got] == [True, True, False, False]  # scored, not failure-filled
        assert actor_pid(reward) != pid
        chaos_record("reward(fast)", survived=True, recover_s=recover_s)
    finally:
        ray.kill(reward, no_restart=True)


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from orchestra.rundir import checkpoint

    run = sys.argv[1]
    checkpoint.save(run, 1, lambda d: (d / "weights.bin").write_bytes(b"1" * 4096), {"ok": 1}, keep=0)

    def slow(d: Path) -> None:
        with open(d / "weights.bin", "wb") as f:
            for _ in range(10_000):
                f.write(b"2" * 4096)
                f.flush()
                print("writing", flush=True)
                time.sleep(0.01)

    checkpoint.save(run, 2, slow, {"ok": 2}, keep=0)
""")


def test_checkpoint_writer_killed_mid_save_leaves_the_last_good_one(tmp_path, chaos_record):
    """A process SIGKILLed while writing step 2 leaves step 1 as the newest good checkpoint, no half
    checkpoint under a real name, and a stray temp dir that the next save prunes."""
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(run)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    killed = sigkill(proc.pid)
    proc.wait(timeout=30)
    assert [p.name for p in checkpoint.candidates(run)] == ["step_000001"]
    assert all(checkpoint.verify(p) is None for p in checkpoint.candidates(run))
    assert list(checkpoint.checkpoint_dir(run).glob(".tmp_step_000002_*"))  # the interrupted write
    good = checkpoint.latest_good(run)
    assert good is not None and checkpoint.read_meta(good) == {"ok": 1, "step": 1}
    checkpoint.save(run, 2, lambda d: (d / "weights.bin").write_bytes(b"2"), {"ok": 2}, keep=0)  # resumed run
    assert not list(checkpoint.checkpoint_dir(run).glob(".tmp_step_*"))
    assert checkpoint.read_meta(checkpoint.latest_good(run))["step"] == 2
    chaos_record("checkpoint-writer(fast)", survived=True, recover_s=time.monotonic() - killed)


# ---------------------------------------------------------------- the chaos suite proper (opt-in)
def check_checkpoints(run_dir: Path) -> int:
    """Every checkpoint verifies against its manifest and its learner state loads; returns how many."""
    import torch
    from transformers import AutoModelForCausalLM

    from actors.learner import OPTIMIZER_FILE, RNG_FILE, STATE_FILE

    paths = checkpoint.candidates(run_dir)
    for p in paths:
        assert checkpoint.verify(p) is None, p
        learner = p / "learner"
        model = AutoModelForCausalLM.from_pretrained(learner)
        assert torch.isfinite(model(input_ids=torch.tensor([[1, 2, 3]])).logits).all()
        torch.load(learner / OPTIMIZER_FILE, weights_only=True)
        torch.load(learner / RNG_FILE, weights_only=True)
        json.loads((learner / STATE_FILE).read_text())
        json.loads((p / "reward_state.json").read_text())
    return len(paths)


@pytest.fixture(scope="module")
def trainer(ray_cluster, tmp_path_factory):
    """One trainer for the in-step kills (start-up, SFT and step 1 once): each test runs one more step."""
    from cluster.trainer import Trainer

    t = Trainer(small_cfg(tmp_path_factory.mktemp("chaos"), "algo.steps=1", *CHAOS_CFG))
    try:
        t.fit()
        yield t
    finally:
        t.close()


def chaos_step(trainer: Any, kill: Any, probe: Any, when: Any = None) -> dict[str, Any]:
    """Run one more training step through `fit()` (resume from the last checkpoint, one step, final eval) and
    SIGKILL `kill(trainer)`'s actor once `when(trainer)` holds during the step's rollout (default: 0.5 s in,
    with 512-token generations so episodes are in flight). `probe(trainer)` returns once the role serves
    again. Returns the accounting of every training episode requested (over all attempts of the step)."""
    trainer.cfg.algo.steps += 1
    target = trainer.cfg.algo.steps
    if trainer.tracker is not None:
        trainer.tracker.close()
    rollout, sampling = trainer.rollout, trainer._sampling
    requested: list[str] = []
    answered: list[dict[str, Any]] = []
    out: dict[str, Any] = {"step": target, "attempts": 0}
    handle = kill(trainer)
    pid = actor_pid(handle)

    def killer(started: float) -> None:
        while not (when(trainer) if when else time.monotonic() - started > 0.5):
            if time.monotonic() - started > 60:
                break
            time.sleep(0.02)
        out["killed"] = sigkill(pid)
        while True:
            try:
                probe(trainer, handle)
                out["recover_s"] = time.monotonic() - out["killed"]
                return
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, AssertionError):
                if time.monotonic() - out["killed"] > HANG_S or out.get("error"):
                    return
                time.sleep(0.2)

    def chaos_rollout(requests: list[dict[str, Any]], eval_mode: bool = False, bar: Any = None) -> list[Any]:
        if eval_mode:
            return rollout(requests, eval_mode, bar)
        out["attempts"] += 1
        requested.extend(r["uid"] for r in requests)
        if out["attempts"] == 1:
            out["thread"] = threading.Thread(target=killer, args=(time.monotonic(),), daemon=True)
            out["thread"].start()
        results = rollout(requests, eval_mode)
        answered.extend(results)
        return results

    trainer.rollout = chaos_rollout
    trainer._sampling = lambda eval_mode: sampling(True) if eval_mode else {
        "max_tokens": 512, "temperature": 1.0, "top_p": 1.0, "top_k": 0}

    def run() -> None:
        try:
            out["summary"] = trainer.fit()
        except BaseException:  # noqa: BLE001 - reported by the test
            out["error"] = traceback.format_exc()
        finally:
            out["done"] = True

    runner = threading.Thread(target=run, daemon=True)
    try:
        runner.start()
        runner.join(timeout=HANG_S)
        out["hang"] = int(runner.is_alive())
        if "thread" in out:  # the prober stops once the role serves again (or the step failed)
            out["thread"].join(timeout=60)
    finally:
        trainer.rollout, trainer._sampling = rollout, sampling
    failure = trainer.cfg.reward.failure_reward
    ok = [r for r in answered if r.scored is not None and (r.scored.status in ("scored", "late") or (
        r.scored.status == "error" and r.scored.reward == failure))]
    out["unaccounted"] = sum((Counter(requested) - Counter(r.uid for r in ok)).values())  # by identity
    out["statuses"] = sorted(r.scored.status for r in answered if r.scored is not None)
    rows = {r["step"]: r for r in read_metrics(trainer.dir / "metrics.jsonl", kind="train")}
    out["row"] = rows.get(target)
    out["checkpoints"] = check_checkpoints(trainer.dir)
    return out


def serves(method: str):
    def probe(trainer: Any, handle: Any) -> None:
        ray.get(getattr(handle, method).remote(), timeout=5)
    return probe


def settle(out: dict[str, Any], kind: str, chaos_record: Any) -> None:
    survived = out.get("summary") is not None and out["row"] is not None and "recover_s" in out
    chaos_record(kind, survived=survived, unaccounted=out["unaccounted"], hang=out["hang"],
                 recover_s=out.get("recover_s", float("nan")))
    assert "error" not in out, out["error"]
    assert out["hang"] == 0 and survived and out["unaccounted"] == 0, out
    assert out["checkpoints"] == out["step"] + 1  # steps 0..N, every one loads


@pytest.mark.chaos
def test_tool_server_killed_under_a_step(trainer, chaos_record):
    out = chaos_step(trainer, lambda t: t.tools["answer"], serves("ready"))
    settle(out, "tool_server", chaos_record)
    assert out["attempts"] == 1


@pytest.mark.chaos
def test_rollout_worker_killed_under_a_step(trainer, chaos_record):
    out = chaos_step(trainer, lambda t: t.workers[0], serves("ready"))
    settle(out, "rollout_worker", chaos_record)
    assert out["attempts"] == 1 and set(out["statuses"]) <= {"scored"}  # its episodes played again, none failed
    assert wait_restarted(trainer.workers[0]) == 0
    assert ray.get(trainer.workers[0].ready_version.remote()) == ray.get(trainer.learner.version.remote())


@pytest.mark.chaos
def test_reward_actor_killed_under_a_step(trainer, chaos_record):
    def pending(t: Any) -> bool:  # kill with a group waiting at the barrier
        return ray.get(t.reward.__ray_call__.remote(lambda self: len(self._groups))) > 0

    out = chaos_step(trainer, lambda t: t.reward, lambda t, h: ray.get(h.__ray_call__.remote(lambda self: 0),
                                                                       timeout=5), when=pending)
    settle(out, "reward_actor", chaos_record)
    assert out["attempts"] == 1 and set(out["statuses"]) <= {"scored"}  # re-scored, none failure-filled


@pytest.mark.chaos
def test_learner_killed_under_a_step_resumes_from_the_last_checkpoint(trainer, chaos_record):
    """Recovered = a replacement learner holds the newest good checkpoint again (Trainer._recover)."""
    before, restore, restored = trainer.learner, trainer.restore, []

    def restore_and_note(path: Path) -> Any:
        result = restore(path)
        restored.append(path.name)  # once the restore is complete
        return result

    trainer.restore = restore_and_note

    def replaced(t: Any, handle: Any) -> None:  # fit's own resume is restore 1, the recovery restore 2
        h = t.learner
        assert len(restored) == 2 and h is not None and h is not handle
        ray.get(h.version.remote(), timeout=5)

    try:
        out = chaos_step(trainer, lambda t: t.learner, replaced)
    finally:
        trainer.restore = restore
    settle(out, "learner", chaos_record)
    # fit's own resume restores step N-1, and so does the recovery after the kill
    assert restored == [f"step_{out['step'] - 1:06d}"] * 2
    assert trainer.learner is not before and out["attempts"] == 2  # the lost step re-ran on the new learner
    assert ray.get(trainer.learner.version.remote()) == ray.get(trainer.workers[0].ready_version.remote())


@pytest.mark.chaos
def test_driver_killed_mid_run_resumes_from_the_last_checkpoint(ray_cluster, tmp_path, chaos_record):
    """`python -m cluster.train` (attached to the session's cluster, so its actors die with it) is SIGKILLed
    once step 1 is checkpointed; the same command again resumes from the newest good checkpoint and finishes
    with every step's episodes scored and every checkpoint loadable."""
    from tests.cluster.test_train import SMALL

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "cluster.train", *SMALL, *CHAOS_CFG, f"run_dir={run}", "algo.steps=3",
           f"cluster.address={ray.get_runtime_context().gcs_address}"]
    log1 = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, cwd=REPO, stdout=log1, stderr=subprocess.STDOUT)
    start = time.monotonic()
    while not (checkpoint.checkpoint_dir(run) / "step_000001").is_dir():
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() - start < HANG_S, "driver made no checkpoint"
        time.sleep(0.1)
    killed = sigkill(first.pid)
    first.wait(timeout=30)
    log2 = open(tmp_path / "second.log", "w")
    second = subprocess.Popen(cmd, cwd=REPO, stdout=log2, stderr=subprocess.STDOUT)
    hang, recover_s = 0, float("nan")
    while second.poll() is None and time.monotonic() - killed < HANG_S:
        if recover_s != recover_s and "resumed from" in (tmp_path / "second.log").read_text():
            recover_s = time.monotonic() - killed  # relaunch, attach, actors up, checkpoint restored
        time.sleep(0.2)
    if second.poll() is None:
        second.kill()
        hang = 1
    rc = second.wait(timeout=30)
    text = (tmp_path / "second.log").read_text()
    rows = {r["step"]: r for r in read_metrics(run / "metrics.jsonl", kind="train")}
    unaccounted = sum(4 - rows[s]["reward_actor"]["episodes"] if s in rows else 4 for s in (1, 2, 3))
    survived = rc == 0 and "resumed from step_00000" in text and (run / "summary.json").is_file()
    chaos_record("driver", survived=survived, unaccounted=unaccounted, hang=hang, recover_s=recover_s)
    assert survived and hang == 0, text[-3000:]
    assert unaccounted == 0 and sorted(rows) == [1, 2, 3]
    assert check_checkpoints(run) == 4  # steps 0..3
