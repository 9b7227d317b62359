"""pass^k and the eval hook; the reward wrapper's failure path; task conversion and dataset specs."""

from __future__ import annotations

import logging

import pytest

from orchestra.types import Trajectory
from tools.tau2.evaluation import parse_dataset, pass_hat_k, run_tau2_eval, summarize_tau2


def test_pass_hat_k_is_tau_bench_estimator():
    s = {"a": [True, True, False, False], "b": [True, True, True, True]}
    assert pass_hat_k(s, 1) == pytest.approx((0.5 + 1.0) / 2)
    assert pass_hat_k(s, 2) == pytest.approx((1 / 6 + 1.0) / 2)
    assert pass_hat_k(s, 4) == pytest.approx((0.0 + 1.0) / 2)
    assert pass_hat_k(s, 5) is None


def test_parse_dataset_spec():
    assert parse_dataset("tau2:airline") == {"domain": "airline", "version": "v0.2.0"}
    assert parse_dataset("tau2:mock:current:/x/tasks.json") == {"domain": "mock", "version": "current",
                                                                "path": "/x/tasks.json"}
    with pytest.raises(ValueError, match="tau2:<domain>"):
        parse_dataset("loader:frames:x")


class _Driver:
    """Stands in for Tau2EpisodeDriver: task 0 always passes, task 1 passes on even trials."""

    def __init__(self, trial):
        self.trial = trial

    async def run(self, task, sampling, uid="", episode_id=""):
        ok = task.id == "t0" or self.trial % 2 == 0
        traj = Trajectory(task_id=task.id, uid=uid, episode_id=episode_id, termination="answered",
                          correct=ok, cost_usd=0.01 * (1 + self.trial), latency_s=1.0)
        traj.meta.update(tau2_score={"score": float(ok)}, tau2_termination="user_stop", user_cost_usd=0.5)
        return traj


async def test_run_and_summarize():
    from tests.helpers.fakes import make_task

    tasks = [make_task(0, category="func_call"), make_task(1, category="func_call")]
    records = await run_tau2_eval(_Driver, tasks, trials=4, concurrency=3)
    assert len(records) == 8 and {r["trial"] for r in records} == {0, 1, 2, 3}
    summary = summarize_tau2(records, ks=(1, 2, 4))
    assert summary["pass^1"] == pytest.approx(0.75) and summary["pass^4"] == pytest.approx(0.5)
    assert summary["mean_cost_usd"] == pytest.approx(0.025) and summary["mean_user_cost_usd"] == 0.5
    assert summary["terminations"] == {"user_stop": 8}


def test_evaluator_exception_scores_zero_with_reason(mock_domain, caplog):
    from tau2.data_model.message import ToolMessage

    from tools.tau2.reward import evaluate_messages

    task = next(t for t in mock_domain.tasks("v0.2.0") if t.evaluation_criteria and t.evaluation_criteria.actions)
    broken = [ToolMessage(id="x", role="tool", content="orphan")]  # a tool message with no call: replay fails
    with caplog.at_level(logging.WARNING, logger="tools.tau2.reward"):
        score = evaluate_messages(mock_domain, task, broken, "user_stop")
    assert score.score == 0.0 and not score.correct and "Tool message not expected" in score.error
    assert any("evaluator failed" in r.message for r in caplog.records)
    early = evaluate_messages(mock_domain, task, [], "max_steps")
    assert early.score == 0.0 and early.error is None


def test_to_task_round_trip(mock_domain):
    from orchestra.types import Task
    from tools.tau2.domain import domain_tasks, tau2_task_of

    tasks = domain_tasks("mock", limit=3, model_mapping={"expert-1": "gpt-5"})
    assert len(tasks) == 3 and all(t.category == "func_call" and t.data_source == "tau2/mock" for t in tasks)
    again = Task.from_dict(tasks[0].to_dict())  # crosses JSONL / Ray unchanged
    assert tau2_task_of(again).id == tasks[0].meta["tau2_task_id"]
    with pytest.raises(ValueError, match="unknown τ² domain"):
        domain_tasks("banking")


async def test_driver_factory_end_to_end_with_scripted_policy_and_user(mock_domain):
    """The hook as cluster/tau2_eval would call it, with an in-process scripted user (no LLM)."""
    from orchestra.agent.prompt import Prompter
    from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
    from tools.tau2.domain import domain_tasks
    from tools.tau2.evaluation import driver_factory

    class ScriptedUser:
        async def open(self, episode_id, task_json):
            pass

        async def reply(self, episode_id, text):
            stop = "created" in text
            return {"text": "Thanks ###STOP###" if stop else "Create 'Important Meeting' for user_1 please.",
                    "stop": "stop" if stop else None, "error": None}

        async def close(self, episode_id):
            pass

    tok = ByteTokenizer()
    script = [call_text("create_task", user_id="user_1", title="Important Meeting"), "It is created."]
    make = driver_factory("mock", lambda trial: ScriptedEngine(tok, script), Prompter(tok), ScriptedUser(),
                          eos_token_ids=[tok.eos_token_id], max_context_tokens=60000)
    tasks = [t for t in domain_tasks("mock") if t.meta["tau2_task_id"] == "create_task_1"]
    summary = summarize_tau2(await run_tau2_eval(make, tasks, trials=2, concurrency=2), ks=(1, 2))
    assert summary["pass^1"] == 1.0 and summary["pass^2"] == 1.0 and summary["episodes"] == 2


def test_judgement_feeds_the_rubric():
    from reward.rubric import scalar_reward
    from tools.tau2.reward import judgement_of

    traj = Trajectory(task_id="t", uid="t", termination="answered")
    assert judgement_of(traj).correct is False
    traj.meta["tau2_score"] = {"score": 1.0, "correct": True, "breakdown": {"DB": 1.0, "COMMUNICATE": 1.0}}
    j = judgement_of(traj)
    assert j.correct and j.score == 1.0 and j.reason == "COMMUNICATE=1, DB=1"
    pref = {"accuracy": 1.0, "cost": 0.5}
    good, bad = (scalar_reward(c, 0.01, 2.0, {"expert-1": 1}, pref) for c in (j.correct, False))
    assert good.terms["accuracy"] == 1.0 and bad.terms["accuracy"] == 0.0
