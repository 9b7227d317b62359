"""score_group end to end: judges + accounting + rubric + advantages, every number traceable."""

from __future__ import annotations

import logging

import pytest

from orchestra.types import Task
from reward.score import score_group

P = {"accuracy": 1.0, "cost": 0.5, "latency": 0.0}


def _task(**kw):
    base = dict(id="t7", problem="What is 1/2 as a decimal?", answer="0.5", data_source="math500", pref=P)
    return Task(**{**base, **kw})


async def test_toolorchestra_group_with_an_errored_member(episode, caplog):
    trajs = [episode(uid="u", answer="\\frac{1}{2}", charges=[("expert-1", 0.02, 1.0)], models={"expert-1": "m"},
                     episode_id="e0"),
             episode(uid="u", answer="0.50", charges=[("search", 0.01, 1.0)], episode_id="e1"),
             episode(uid="u", answer="0.7", charges=[("search", 0.0, 1.0)], episode_id="e2"),
             episode(uid="u", answer=None, termination="error", episode_id="e3")]
    trajs[3].error = "engine died"
    with caplog.at_level(logging.DEBUG, logger="orchestra.reward"):
        out = await score_group(trajs, _task(), judges={"math500": "math", "default": "exact"},
                                failure_reward=-0.5, price_in=1.0, price_out=1.0)
    assert [s.traj_id for s in out] == ["e0", "e1", "e2", "e3"]
    assert [s.correct for s in out] == [True, True, False, False] and trajs[0].correct is True
    # among the three live episodes: accuracy [1,1,0] -> [1,1,0]; cost -[.02,.01,0] -> [0,.5,1]
    assert [s.reward for s in out] == pytest.approx([1.0, 1.25, 0.0, -0.5])
    assert out[1].terms == pytest.approx({"accuracy": 1.0, "cost": 0.25, "latency": 0.0})
    assert out[3].status == "error" and "engine died" in out[3].judgement["reason"]
    assert out[0].cost["experts_usd"] == pytest.approx(0.02) and out[0].judgement["judge"] == "math"
    # advantages over all four rewards [1, 1.25, 0, -0.5]: mean 0.4375, sample std 0.8260
    std = (sum((r - 0.4375) ** 2 for r in [1, 1.25, 0, -0.5]) / 3) ** 0.5
    assert [s.advantage for s in out] == pytest.approx([(r - 0.4375) / std for r in [1, 1.25, 0, -0.5]], rel=1e-5)
    assert sum(s.advantage for s in out) == pytest.approx(0.0, abs=1e-9)
    assert any("group u: 4 episodes, 2 correct, 1 errored" in m for m in caplog.messages)
    assert sum("reward {" in m for m in caplog.messages) == 4  # one DEBUG breakdown per episode
    d = out[0].to_dict()
    assert {"traj_id", "uid", "correct", "reward", "terms", "advantage", "dropped", "cost", "latency_s"} <= set(d)


async def test_all_wrong_group_is_dropped(episode):
    out = await score_group([episode(uid="w", answer="9"), episode(uid="w", answer="8")], _task())
    assert [s.reward for s in out] == [0.0, 0.0] and all(s.dropped and s.advantage == 0 for s in out)


async def test_scalar_rubric_groups_by_uid_through_verl(episode):
    pref = {"accuracy": 1.0, "cost": 2.0, "latency": 0.01}
    trajs = [episode(uid="a", answer="0.5", charges=[("s", 0.01, 1.0), ("e", 0.02, 2.0)]),
             episode(uid="a", answer="no"), episode(uid="b", answer="0.5")]
    out = await score_group(trajs, [_task(pref=pref)] * 3, rubric="scalar", cost_scale=1.0, latency_scale=1.0)
    assert [s.reward for s in out] == pytest.approx([0.91, 0.0, 1.0])
    # group a: mean .455, sample std .91/sqrt(2); group b alone: A = R (verl's convention)
    s = 0.91 / 2 ** 0.5
    assert [x.advantage for x in out] == pytest.approx([0.455 / s, -0.455 / s, 1.0], rel=1e-4)


async def test_scalar_group_that_differs_only_by_noise_is_dropped(episode):
    """All wrong, a tenth of a cent apart: verl's std division would make that +-0.7; min_std drops it."""
    trajs = [episode(uid="n", answer="no", charges=[("e", 0.001 * k, 0.0)]) for k in range(3)]
    out = await score_group(trajs, [_task()] * 3, rubric="scalar", cost_scale=0.01, min_std=0.1)
    assert [s.reward for s in out] == pytest.approx([0.0, -0.05, -0.1])  # sample std 0.05 <= 0.1
    assert all(s.dropped and s.advantage == 0.0 for s in out)
    big = await score_group(trajs, [_task()] * 3, rubric="scalar", cost_scale=0.001, min_std=0.1, clip=0.5)
    assert [s.advantage for s in big] == pytest.approx([0.5, 0.0, -0.5]) and not any(s.dropped for s in big)


async def test_unanswered_penalty_ranks_no_answer_below_a_cheap_wrong_one(episode):
    """Without the penalty a malformed episode (no answer, $0) outscores a cheap wrong answer; with it, not.
    The term is listed and the terms still sum to the reward."""
    trajs = [episode(uid="f", answer="0.5", charges=[("e", 0.001, 0.0)]),
             episode(uid="f", answer="0.7", charges=[("e", 0.001, 0.0)]),
             episode(uid="f", answer=None, termination="max_turns")]
    plain = await score_group(trajs, [_task()] * 3, rubric="scalar", cost_scale=0.01)
    assert [s.reward for s in plain] == pytest.approx([0.95, -0.05, 0.0])
    out = await score_group(trajs, [_task()] * 3, rubric="scalar", cost_scale=0.01, unanswered_penalty=0.5)
    assert [s.reward for s in out] == pytest.approx([0.95, -0.05, -0.5])
    assert out[2].terms["unanswered"] == -0.5 and sum(out[2].terms.values()) == pytest.approx(-0.5)
    assert "unanswered" not in out[1].terms
    assert out[2].advantage < out[1].advantage < out[0].advantage


async def test_bad_rubric_is_a_clear_error(episode):
    with pytest.raises(ValueError, match="unknown rubric"):
        await score_group([episode()], _task(), rubric="fancy")


async def test_llm_judged_group_calls_the_grader_concurrently(episode, fake_openai):
    from reward.judges import LLMJudge

    url, seen, server = fake_openai
    llm = LLMJudge(url, "grader", timeout_s=5, max_retries=0)
    task = _task(id="cap", problem="Capital of France?", answer="Paris", data_source="frames")
    answers = ["Paris, France", "London", "paris", "The city of Paris"]
    trajs = [episode(uid="c", answer=a, charges=[("search", 0.001 * (k + 1), 1.0)]) for k, a in enumerate(answers)]
    out = await score_group(trajs, task, judges={"frames": "llm"}, llm=llm)
    assert [s.correct for s in out] == [True, False, True, True]
    assert out[2].judgement["reason"] == "exact-match shortcut" and len(seen) == 3
    assert [s.judgement["judge"] for s in out] == ["llm"] * 4
    assert server.max_in_flight >= 2  # the three graded answers overlapped at the server
    await llm.close()
