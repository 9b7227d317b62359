"""orchestra/data/routing_log.py read_log on layouts the CLI tests (tests/cluster/test_routing_log.py) leave out:
verdicts-only wide logs, how verdict columns are told from other columns, exclusions by id and by prompt; and the
replay expert's answer where a log recorded no text."""

from __future__ import annotations

import asyncio
import json

import pytest

from orchestra.data.log_outputs import write_outputs
from orchestra.data.routing_log import RoutingLogError, read_log
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


def test_settle_majority_and_first():
    from orchestra.data.log_repeats import settle

    assert settle([True, False, False], "majority") == (1, False)  # the first record of the winning verdict
    assert settle([False, True, True, False, True], "majority") == (1, False)
    assert settle([True, False], "majority") == (0, True) and settle([True, False, False, True], "majority") == (0, True)
    assert settle([True, False, False], "first") == (0, False)
    with pytest.raises(ValueError, match="rule 'error'"):
        settle([True, False], "error")  # stopping is read_log's, with the rows named


def test_repeats_of_a_long_log_are_judged_before_they_are_compared(tmp_path):
    """A resampled run appended to a gold-only long log: records are judged (the caller's judge), then compared by
    verdict: another text with the same verdict merges, keeping the first record; without a judge the repeat that
    needs one is an error naming its row."""
    rows = [{"id": "1", "prompt": "2+2?", "answer": "4", "model": "a", "response": "4"},
            {"id": "1", "prompt": "2+2?", "answer": "4", "model": "b", "response": "5"},
            {"id": "2", "prompt": "3+3?", "answer": "6", "model": "a", "response": "6"},
            {"id": "2", "prompt": "3+3?", "answer": "6", "model": "b", "response": "6"},
            {"id": "1", "prompt": "2+2?", "answer": "4", "model": "a", "response": " 4 "},  # run 2: same verdict
            {"id": "1", "prompt": "2+2?", "answer": "4", "model": "b", "response": "4"}]  # run 2: b now right
    path = _jsonl(tmp_path / "log.jsonl", rows)
    judged: list[tuple[str, str, str]] = []

    def judge(items):
        judged.extend(items)
        return [float(a.strip() == g) for a, g, _ in items]

    rl = read_log(path, judge=judge)
    assert rl.judged == len(judged) == 6 and ("5", "4", "2+2?") in judged
    r = rl.repeats
    assert (r.questions, r.merged, r.conflicts, r.ties, r.overruled) == (1, 1, 1, 1, 1)
    q1 = rl.questions[0]
    assert q1.calls["a"].response == "4" and q1.calls["a"].where == "row 1 (line 1)"  # merged: the first record
    assert q1.calls["b"].score == 0.0  # a tie under majority: the first record
    assert read_log(path, judge=judge, duplicates="first").questions[0].calls["b"].response == "5"
    with pytest.raises(RoutingLogError, match=r"row 6 \(line 6\): model 'b' is recorded right on question '1' here "
                                              r"and wrong at row 2 \(line 2\)"):
        read_log(path, judge=judge, duplicates="error")
    with pytest.raises(RoutingLogError, match=r"row 1 \(line 1\): a repeated answer without 'correct' needs a judge"):
        read_log(path)
    with pytest.raises(RoutingLogError, match="duplicates 'last': expected one of majority, first, error"):
        read_log(path, duplicates="last")


def test_ids_name_questions_a_prompt_under_two_ids_is_two_questions_and_counted(tmp_path):
    rows = [{"id": "anatomy-3", "prompt": "p", "m1": True, "m2": False},
            {"id": "clinical-7", "prompt": "p", "m1": True, "m2": True},
            {"id": "anatomy-4", "prompt": "q", "m1": False, "m2": False}]
    rl = read_log(_jsonl(tmp_path / "log.jsonl", rows))
    assert [q.id for q in rl.questions] == ["anatomy-3", "clinical-7", "anatomy-4"]
    assert (rl.repeats.questions, rl.repeats.shared_prompts) == (0, 1)
    assert "1 prompts appear under several ids and stay separate questions" in rl.repeats.summary()
    # without ids the prompt's text is the question, character for character: "p " is another question
    rows = [{"prompt": "p", "m1": True, "m2": False}, {"prompt": "p", "m1": True, "m2": False},
            {"prompt": "p ", "m1": True, "m2": False}]
    rl = read_log(_jsonl(tmp_path / "bare.jsonl", rows))
    assert len(rl.questions) == 2 and (rl.repeats.questions, rl.repeats.merged, rl.repeats.shared_prompts) == (1, 2, 0)


def test_several_files_keep_a_family_column_and_read_mixed_formats(tmp_path):
    """A family column wins over file names; files of different formats are one log; rows are named by file."""
    _jsonl(tmp_path / "part1.jsonl", [{"prompt": "p", "subject": "bio", "m1": True, "m2": False}])
    (tmp_path / "part2.csv").write_text("prompt,subject,m1,m2\nq,chem,false,true\np,bio,true,false\n")
    rl = read_log(tmp_path)
    assert (rl.files, rl.family_column, rl.family_from_files) == (2, "subject", False)
    assert [(q.category, q.where) for q in rl.questions] == [("bio", f"{tmp_path / 'part1.jsonl'} row 1 (line 1)"),
                                                             ("chem", f"{tmp_path / 'part2.csv'} row 1 (line 2)")]
    assert (rl.repeats.questions, rl.repeats.merged) == (1, 2)
    one = read_log(tmp_path / "part2.csv")  # one file: its name says nothing about the family
    assert not one.family_from_files and one.files == 1
