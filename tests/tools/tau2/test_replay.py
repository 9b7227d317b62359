"""Gold replays through our adapter (tools/tau2/gold.py) score 1.0 under the official evaluator; dropping the
last write scores 0.

Every mock task (wheel v0.2.0 and tau2-bench HEAD from ../shared/data) and a fixed sample of airline tasks
run by default; `-m slow` runs every airline task of both versions (~6 min on 2 cores).

Why the full airline replay stays `slow` (measured on the 2-core dev machine): environments already come from
an in-memory copy of the loaded DB (tools/tau2/domain.Tau2Domain.new_env unpickles a pristine blob, no
db.json re-read, and tools/tau2/reward.py injects it as the evaluator's `environment_constructor`). What is
left is the official check itself: each scored replay builds three full environments (the episode's, the
evaluator's predicted and gold ones; 0.2-0.4 s each for the 2.7 MB pickled airline DB, a deepcopy is no
faster) and hashes two full DBs (model_dump + json + sha256, 0.15-0.3 s each). Both versions x ~46 tasks x
(gold + drop-last-write) is ~180 replays, so >= ~3 min even at idle, against a 40 s goal. Going below that
needs copy-on-write environments and incremental DB hashes, i.e. replacing how tau2's evaluator builds and
compares DBs, which would no longer be the official check this test exists to exercise."""

from __future__ import annotations

import pytest

from tools.tau2.gold import gold_actions, last_write_index, replay

AIRLINE_SAMPLE = ("11",)  # a multi-write task; `-m slow` covers all of them


async def _check(domain, tasks, version, drop=True):
    for t in tasks:
        acts = gold_actions(t)
        if not acts:
            continue
        score, errors = await replay(domain, t, version)
        assert not errors, (t.id, errors)
        assert score.score == 1.0 and score.correct, (t.id, score.to_dict())
        skip = last_write_index(domain, acts)
        if drop and skip is not None:
            dropped, _ = await replay(domain, t, version, skip=skip)
            assert dropped.score == 0.0 and not dropped.correct, (t.id, dropped.to_dict())
            # the DB differs; or an env assertion raised on the missing row, which scores 0 with its reason
            assert dropped.info.get("db_match") is False or "not found" in (dropped.error or ""), dropped.to_dict()


async def test_mock_gold_replay_wheel_tasks(mock_domain):
    tasks = mock_domain.tasks("v0.2.0")
    assert sum(bool(gold_actions(t)) for t in tasks) >= 5
    await _check(mock_domain, tasks, "v0.2.0")


async def test_mock_gold_replay_current_tasks(mock_domain, shared_data):
    from tools.tau2.domain import needs_user_tools

    tasks = mock_domain.tasks("current", shared_data / "tau2" / "mock" / "tasks.json")
    # HEAD's one dual-control mock task needs user tools the wheel's mock domain lacks (reported as a gap)
    assert [t.id for t in tasks if needs_user_tools(t)] == ["update_task_with_user_tools"]
    tasks = [t for t in tasks if not needs_user_tools(t)]
    await _check(mock_domain, tasks, "current")


async def test_airline_gold_replay_sample(airline_domain, shared_data):
    tasks = [t for t in airline_domain.tasks("v0.2.0") if t.id in AIRLINE_SAMPLE]
    assert len(tasks) == len(AIRLINE_SAMPLE)
    await _check(airline_domain, tasks, "v0.2.0", drop=True)


def test_v020_wheel_tasks_match_shared_copy(airline_domain, shared_data):
    wheel = {t.id: t.model_dump() for t in airline_domain.tasks("v0.2.0")}
    shared = {t.id: t.model_dump() for t in airline_domain.tasks("v0.2.0", shared_data / "tau2" / "airline" /
                                                                 "tasks_v0.2.0.json")}
    assert wheel == shared and len(wheel) == 50


@pytest.mark.slow
@pytest.mark.parametrize("version,file", [("v0.2.0", "tasks_v0.2.0.json"), ("current", "tasks.json")])
async def test_airline_gold_replay_every_task(airline_domain, shared_data, version, file):
    tasks = airline_domain.tasks(version, shared_data / "tau2" / "airline" / file)
    assert sum(bool(gold_actions(t)) for t in tasks) >= 40
    await _check(airline_domain, tasks, version)
