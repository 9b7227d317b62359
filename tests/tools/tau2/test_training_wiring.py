"""τ² through the training path: a RolloutWorker (plain class, no Ray) runs a τ² mock task with the τ² episode
driver (scripted policy via engine.kind=package.module:factory, tau2's user simulator against a fake OpenAI
server on 127.0.0.1) and its trajectory carries the official evaluator's verdict, which reward/score.py then
uses as the accuracy term (τ² tasks have no gold answer string)."""

from __future__ import annotations

import pytest

from actors.rollout_worker import RolloutWorker, trajectory
from orchestra.types import Trajectory
from reward.score import score_group
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.fakes import call_text
from tools.tau2.domain import to_task

GOOD = [call_text("create_task", user_id="user_1", title="Important Meeting"),
        "<message>Done: the task is created.</message>"]


def _user_reply(messages):
    last = messages[-1]["content"] if messages else ""
    if "created" in last.lower():
        return "Great, thank you! ###STOP###"
    return "Hi, please create a task called 'Important Meeting' for user_1."


@pytest.fixture(scope="module")
def user_server():
    with FakeOpenAI(_user_reply) as server:
        yield server


@pytest.fixture(scope="module")
def mock_task(mock_domain):
    t = next(t for t in mock_domain.tasks("v0.2.0") if t.id == "create_task_1")
    return to_task(t, "mock", "v0.2.0", pref={"accuracy": 1.0, "cost": 0.0})


def _worker(script, tau2):
    return RolloutWorker(worker_id=0, model_name="tiny", model_kwargs={}, engine_kind="tests.helpers.scripted_policy:scripted_engine",
                         engine_kwargs={"script": script},
                         agent_kwargs={"context_mode": "transcript", "answer_mode": "text", "max_turns": 6,
                                       "max_context_tokens": 60000},
                         prompter_kwargs={}, zoo={}, tau2=tau2)


def _tau2(server):
    return {"user_model": "openai/fake-user", "user_api_base": server.base_url, "user_timeout_s": 10,
            "user_num_retries": 0, "max_errors": 5}


async def test_rollout_worker_runs_tau2_episode_and_reward_uses_its_verdict(mock_task, user_server):
    worker = _worker(GOOD, _tau2(user_server))
    reqs = [{"task": mock_task.to_dict(), "uid": "g0", "group_size": 2}]
    (out,) = await worker.rollout(reqs, {"max_tokens": 400, "temperature": 0.0}, score=False)
    traj = trajectory(out)
    assert traj.error is None and traj.context_mode == "transcript"
    assert traj.meta["tau2_termination"] == "user_stop" and traj.termination == "answered"
    assert traj.correct is True and traj.meta["tau2_score"]["score"] == 1.0, traj.meta.get("tau2_score")
    assert traj.tool_counts == {"create_task": 1} and len(traj.turns) == 2
    # the user simulator saw the worker's agent message (tau2 flips roles: the agent is its "user")
    assert user_server.requests[-1]["messages"][-1]["content"] == "Done: the task is created."
    # the driver was built once and is reused for the next episode of the domain
    assert set(worker._runners["tau2/"].drivers) == {"mock"}

    # reward/score: the τ² verdict (not an exact match on the empty gold answer) is the accuracy term
    wrong = Trajectory(task_id=mock_task.id, uid="g0", episode_id="w", termination="answered",
                       answer="Done: the task is created.", turns=traj.turns[:1])
    wrong.meta["tau2_score"] = {"score": 0.0, "correct": False, "breakdown": {"DB": 0.0}, "info": {}}
    scored = await score_group([traj, wrong], [mock_task, mock_task], rubric="toolorchestra", min_std=0.0)
    assert [s.correct for s in scored] == [True, False]
    assert scored[0].judgement["judge"] == "tau2" and scored[0].judgement["reason"] == "COMMUNICATE=1, DB=1"
    assert scored[0].reward > 0 and scored[1].reward == 0.0 and scored[0].advantage > 0 > scored[1].advantage
    unscored = Trajectory(task_id=mock_task.id, uid="g1", episode_id="u", termination="answered", answer="x")
    (s,) = await score_group([unscored], mock_task, rubric="scalar")
    assert not s.correct and "not scored" in s.judgement["reason"]


async def test_tau2_task_without_user_model_is_an_error_trajectory(mock_task):
    worker = _worker(GOOD, {})
    reqs = [{"task": mock_task.to_dict(), "uid": "g", "group_size": 1}]
    (out,) = await worker.rollout(reqs, {"max_tokens": 50}, score=False)
    traj = trajectory(out)
    assert traj.termination == "error" and "tau2.user_model" in traj.error
