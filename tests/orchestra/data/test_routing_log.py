"""orchestra/data/routing_log.py read_log on layouts the CLI tests (tests/cluster/test_routing_log.py) leave out:
verdicts-only wide logs, how verdict columns are told from other columns, exclusions by id and by prompt; and the
replay expert's answer where a log recorded no text."""

from __future__ import annotations

import asyncio
import json

import pytest

from orchestra.data.routing_log import RoutingLogError, read_log, write_outputs
from orchestra.types import Task, ToolContext


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_wide_log_of_verdicts_only(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("id,prompt,a|correct,b|correct,b|tokens_out\n1,p,true,0,7\n2,q,1,yes,\n")
    rl = read_log(log)
    assert rl.layout == "wide" and rl.models == ["a", "b"]
    assert [(c.response, c.score) for q in rl.questions for c in q.calls.values()] == [
        (None, 1.0), (None, 0.0), (None, 1.0), (None, 1.0)]
    assert rl.questions[0].calls["b"].tokens_out == 7


def test_verdict_columns_are_all_true_false_and_blank_cells_are_unanswered(tmp_path):
    rows = [{"prompt": "p1", "flag": "yes", "score": 3, "m1": True, "m2": "false", "domain": "bio"},
            {"prompt": "p2", "flag": "no", "score": 4, "m1": False, "m2": None, "domain": "chem"}]
    path = _jsonl(tmp_path / "log.jsonl", rows)
    with pytest.raises(RoutingLogError, match="no answer from model 'm2'"):
        read_log(path)
    rl = read_log(path, drop_incomplete=True)
    assert (rl.layout, rl.models, rl.dropped, rl.family_column) == ("by model", ["m1", "m2"], 1, "domain")
    assert rl.questions[0].category == "bio"
    rl = read_log(path, models=["m1", "flag"], columns={"category": "score"})
    assert rl.models == ["m1", "flag"] and rl.family_column == "score" and len(rl.questions) == 2


def test_exclusions_match_ids_and_prompts(tmp_path):
    rows = [{"id": str(i), "prompt": f"  prompt {i}\n", "m1": i % 2 == 0, "m2": True} for i in range(5)]
    path = _jsonl(tmp_path / "log.jsonl", rows)
    rl = read_log(path, exclude={"1", "prompt 3", "nothing"})
    assert [q.id for q in rl.questions] == ["0", "2", "4"] and (rl.excluded, rl.exclude_matched) == (2, 2)
    with pytest.raises(RoutingLogError, match="no question was answered by every model"):
        read_log(path, exclude={str(i) for i in range(5)})


def test_replay_of_a_verdicts_only_log_answers_the_marker_with_no_output_tokens(tmp_path):
    from tools.experts.replay import NO_RESPONSE, ReplayExpert, load_replay
    from tools.pricing import PriceTable

    path = _jsonl(tmp_path / "log.jsonl", [{"prompt": "x" * 40, "m1": True, "m2": False}])
    rl = read_log(path)
    out = write_outputs(rl, tmp_path / "out", {})
    load_replay.cache_clear()
    prices = PriceTable()
    prices.set_override("m2", 1.0, 2.0)
    expert = ReplayExpert("m2", "m2", prices, path=str(out / "replay" / "m2.jsonl"))
    task = Task.from_dict(json.loads((out / "tasks.jsonl").read_text()))
    reply = asyncio.run(expert.complete([], ctx=ToolContext(task=task)))
    assert reply.text == NO_RESPONSE and reply.meta["answer"] == NO_RESPONSE
    assert reply.meta["recorded_correct"] is False and reply.meta["response_recorded"] is False
    assert (reply.tokens_in, reply.tokens_out) == (11, 0) and reply.cost_usd == pytest.approx(11e-6)
