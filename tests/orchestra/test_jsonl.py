"""orchestra/jsonl.py, the one JSONL reader and writer: every record type the project writes as JSONL survives the
writer and the reader with line-break characters (U+0085, U+2028, U+2029, \\x1c-\\x1e, \\x0b, \\x0c, \\r, \\n) in every
text field; the reader splits at "\\n" only (files written raw by older code load too), names file and line on a
bad one, and the writer's appends and atomic writes behave. Regression: a benchmark question holding U+0085, through
`python -m cluster.routing_log`, loads back into the same Task text (it used to fail `make train` with
"tasks.jsonl:1847: not JSON (Unterminated string ...)")."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestra.jsonl import (
    JSONFileError,
    JSONLError,
    JsonlWriter,
    dumps_line,
    iter_jsonl,
    load_jsonl,
    loads_jsonl,
    read_json,
    write_jsonl,
)
from orchestra.types import Task, ToolCall, ToolRecord, ToolResult, Trajectory, Turn

ROOT = Path(__file__).resolve().parents[2]
BREAKS = ("\x85", "\u2028", "\u2029", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\r", "\n")
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def texts(draw) -> str:
    """Random text holding every line-break character once, in random order, and one non-space character (some
    readers strip, and refuse a blank field)."""
    breaks = draw(st.permutations(BREAKS))
    parts = draw(st.lists(st.text(max_size=4), min_size=len(breaks) + 1, max_size=len(breaks) + 1))
    out = [parts[0]]
    for i, (b, p) in enumerate(zip(breaks, parts[1:], strict=True)):
        out += ["x" if i == len(breaks) // 2 else "", b, p]
    return "".join(out)


def _lines(path: Path) -> int:
    """How many lines a naive reader (str.splitlines, the old bug) sees: the writer keeps it at one per record."""
    return len(path.read_text(encoding="utf-8").splitlines())


# ---------------------------------------------------------------- every record type, through writer and reader
@SETTINGS
@given(t=texts())
def test_tasks_round_trip(t):
    from orchestra.data.tasks import load_tasks, save_tasks

    task = Task(id=t, problem=t, answer=t, data_source=t, tools=[t, "answer"], model_mapping={t: t},
                pricing={t: {"input": 1.0, "output": 2.5}}, pref={"accuracy": 1.0}, meta={t: t, "family": [t]})
    with tempfile.TemporaryDirectory() as d:
        path = save_tasks([task, task], Path(d) / "tasks.jsonl")
        assert load_tasks(path) == [task, task] and _lines(path) == 2
        assert [Task.from_dict(r) for r in load_jsonl(path)] == [task, task]


@SETTINGS
@given(t=texts())
def test_episode_and_trajectory_records_round_trip(t):
    from orchestra.rundir.records import EpisodeLog, episode_record, read_records

    result = ToolResult(text=t, cost_usd=0.01, error=t, meta={"model": t, t: [t]}, answer=t, documents=[t])
    traj = Trajectory(task_id=t, uid=t, answer=t, termination="answered", error=t, episode_id=t, meta={t: t},
                      turns=[Turn(prompt_ids=[1, 2], response_ids=[3], logprobs=[-0.5], text=t,
                                  tool_calls=[ToolCall(name="search", arguments={"query": t}, id=t)])],
                      tool_records=[ToolRecord(turn=0, name="search", tool_id=t, arguments={"query": t},
                                               result=result)])
    task = Task(id=t, problem=t, answer=t, meta={"family": t})
    record = episode_record("train", 3, {"task": task.to_dict(), "seed": 7}, {"temperature": 1.0}, traj.to_dict(),
                            {"reward": 0.5, "terms": {t: 1.0}, "correct": True, "status": t}, t)
    with tempfile.TemporaryDirectory() as d:
        path = EpisodeLog(d).write("step_000003", [record, record])
        assert read_records(d) == [record, record] and _lines(path) == 2
        assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # atomic: no leftovers
        write_jsonl(Path(d) / "traj.jsonl", [traj.to_dict()])
        assert [Trajectory.from_dict(r) for r in load_jsonl(Path(d) / "traj.jsonl")] == [traj]


@SETTINGS
@given(t=texts())
def test_metrics_rows_and_eval_results_round_trip(t):
    from orchestra.eval.runner import episode_key, load_done
    from orchestra.rundir.tracking import Tracker, read_metrics

    with tempfile.TemporaryDirectory() as d:
        tracker = Tracker(d, tensorboard=False)
        tracker.log(1, {"loss": 0.25, "note": t, "group": {t: 2.0}}, kind=t)
        tracker.close()
        tracker = Tracker(d, tensorboard=False, resume=True)  # resumed: appends
        tracker.log(2, {"loss": 0.5}, kind=t)
        tracker.close()
        assert read_metrics(Path(d) / "metrics.jsonl", kind=t) == [
            {"step": 1, "kind": t, "loss": 0.25, "note": t, "group": {t: 2.0}}, {"step": 2, "kind": t, "loss": 0.5}]
        # the evaluation runner's results file: appended as episodes finish, read back to resume
        rec = {"policy": t, "preference": t, "seed": 0, "task_id": t, "data_source": t, "family": t, "correct": True,
               "reward": 1.0, "cost_usd": 0.0, "latency_s": 0.0, "tool_counts": {t: 1}, "termination": "answered",
               "answer": t, "turns": 1, "error": None}
        with JsonlWriter(Path(d) / "episodes.jsonl", append=True, default=str) as w:
            w.write(rec)
        assert load_done(Path(d) / "episodes.jsonl") == {episode_key(t, t, 0, t): rec}


@SETTINGS
@given(t=texts())
def test_corpus_passages_and_retrieval_questions_round_trip(t):
    from orchestra.data.tasks import load_corpus, save_corpus
    from tools.retrieval.corpus import load_passages, read_index_meta, write_index_meta
    from tools.retrieval.questions import load_questions

    passages = [{"id": t, "title": t, "text": t}, {"id": "2", "title": "", "text": t + t}]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        path = save_corpus(passages, d / "corpus.jsonl")
        assert load_corpus(path) == passages and _lines(path) == 2
        assert load_passages(path) == [{**p, "text": p["text"].strip()} for p in passages]  # it strips text
        write_index_meta(d, passages, {"kind": "bm25", "count": 2})
        assert read_index_meta(d, "bm25") == (passages, {"kind": "bm25", "count": 2})
        write_jsonl(d / "questions.jsonl", [{"question": t, "supporting_ids": [t, "2"]},
                                            {"question": t, "supporting_titles": [t]}])
        qs = load_questions(d / "questions.jsonl", passages)
        assert [(q.text, q.gold, q.by) for q in qs] == [(t.strip(), frozenset({t, "2"}), "id"),
                                                        (t.strip(), frozenset({t}), "title")]


@SETTINGS
@given(t=texts())
def test_routing_log_rows_round_trip(t):
    from orchestra.data.log_outputs import write_outputs
    from orchestra.data.routing_log import read_log
    from orchestra.data.tasks import load_tasks
    from tools.experts.replay import load_replay

    rows = [{"id": t, "prompt": t, "answer": t, "category": t, "model": m, "response": t + m, "correct": ok,
             "model_answer": t, "tokens_in": 3, "tokens_out": 4} for m, ok in (("m-a", True), ("m-b", False))]
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        write_jsonl(d / "log.jsonl", rows)
        log = read_log(d / "log.jsonl")
        (q,) = log.questions
        assert (q.id, q.prompt, q.answer, q.category) == (t.strip(), t, t.strip(), t)
        assert {m: (c.response, c.model_answer) for m, c in q.calls.items()} == {"m-a": (t + "m-a", t),
                                                                                  "m-b": (t + "m-b", t)}
        out = write_outputs(log, d / "out", {})
        (task,) = load_tasks(out / "tasks.jsonl")
        assert (task.id, task.problem, task.answer, task.meta["family"]) == (t.strip(), t, t.strip(), t)
        load_replay.cache_clear()
        rec = load_replay(str(out / "replay" / "m-a.jsonl"))[t.strip()]
        assert (rec.text, rec.pred, rec.correct, rec.tokens_in) == (t + "m-a", t, True, 3)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts() | st.text(), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=50, deadline=None)
@given(records=st.lists(json_values, min_size=1, max_size=4), compact=st.booleans())
def test_any_json_values_round_trip(records, compact):
    """The synth rejects, τ² episodes and whatever else is written as plain dicts: any JSON value survives."""
    text = "".join(dumps_line(r, compact=compact) for r in records)
    assert len(text.splitlines()) == len(records)  # safe for any line splitter
    assert loads_jsonl(text.encode("utf-8")) == records
    with tempfile.TemporaryDirectory() as d:
        for atomic in (False, True):
            path = write_jsonl(Path(d) / "x.jsonl", records, atomic=atomic, compact=compact)
            assert load_jsonl(path) == records


# ---------------------------------------------------------------- the reader
def test_reader_splits_at_newline_only_and_reads_files_written_raw(tmp_path):
    """Files written by the old writer (ensure_ascii=False: U+0085, U+2028, U+2029 raw), CRLF endings, a BOM and
    blank lines."""
    rows = [{"q": "a\x85b\u2028c\u2029d", "n": 1}, {"q": "ß→∑"}]
    raw = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    (tmp_path / "raw.jsonl").write_bytes(raw)
    assert load_jsonl(tmp_path / "raw.jsonl") == rows
    (tmp_path / "crlf.jsonl").write_bytes(b"\xef\xbb\xbf" + raw.replace(b"\n", b"\r\n") + b"\r\n  \n")
    assert [n for n, _ in iter_jsonl(tmp_path / "crlf.jsonl")] == [1, 2]
    assert load_jsonl(tmp_path / "crlf.jsonl") == rows
    with gzip.open(tmp_path / "z.jsonl.gz", "wb") as f:
        f.write(raw)
    assert load_jsonl(tmp_path / "z.jsonl.gz") == rows


def test_a_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": \n')
    with pytest.raises(JSONLError, match=r"t\.jsonl:3: not JSON \(Expecting value: column 7\)") as e:
        load_jsonl(path)
    assert isinstance(e.value, ValueError) and (e.value.lineno, e.value.colno) == (3, 7)
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(JSONLError, match=r"t\.jsonl:2: not JSON \(invalid UTF-8"):
        load_jsonl(path)
    # the callers' own wording is kept
    from orchestra.data.tasks import load_tasks

    (tmp_path / "tasks.jsonl").write_bytes(b'{"id": "a", "problem": "p\xc2\x85\n')
    with pytest.raises(ValueError, match=r"tasks\.jsonl:1: not JSON \(Unterminated string"):
        load_tasks(tmp_path / "tasks.jsonl")


def test_a_json_file_error_names_the_file_and_what_was_wrong(tmp_path):
    """read_json, the one reader of whole-file JSON lists (routing logs, retrieval questions, τ² tasks) and objects."""
    good = tmp_path / "rows.json"
    good.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"q": "caf\u00e9"}]).encode())  # a byte-order mark is dropped
    assert read_json(good) == [{"q": "caf\u00e9"}]
    (tmp_path / "bad.json").write_text('[{"q": 1},\n {"q": }]')
    (tmp_path / "obj.json").write_text('{"q": 1}')
    cases = {tmp_path / "none.json": (f"{tmp_path / 'none.json'}: no such file", None),
             tmp_path / "bad.json": (f"{tmp_path / 'bad.json'}: line 2: malformed JSON (Expecting value: column 8)", 2),
             tmp_path / "obj.json": (f"{tmp_path / 'obj.json'}: expected a JSON list of rows, got a JSON object", None)}
    for path, (message, line) in cases.items():
        with pytest.raises(JSONFileError) as e:
            read_json(path, list, "a JSON list of rows")
        assert str(e.value) == message and e.value.lineno == line and isinstance(e.value, ValueError)
    assert read_json(tmp_path / "obj.json", dict) == {"q": 1}
    with pytest.raises(JSONFileError, match="expected a JSON list, got a JSON object"):
        read_json(tmp_path / "obj.json")


def test_torn_lines_are_skipped_where_files_grow_while_running(tmp_path):
    """metrics.jsonl and evaluation results: a crash may leave a torn last line, even cut inside a UTF-8 character;
    the next append starts on its own line, so only the torn fragment is lost."""
    from orchestra.rundir.tracking import Tracker, read_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(dumps_line({"step": 1, "kind": "train", "x": 1.0}).encode() + '{"step": 2, "note": "é'.encode()[:-1])
    assert read_metrics(path) == [{"step": 1, "kind": "train", "x": 1.0}]
    with pytest.raises(JSONLError, match=":2: not JSON"):
        load_jsonl(path)
    tracker = Tracker(tmp_path, tensorboard=False, resume=True)
    tracker.log(2, {"x": 2.0})
    tracker.close()
    assert [r["x"] for r in read_metrics(path)] == [1.0, 2.0]
    write_jsonl(path, [{"step": 3, "kind": "train", "x": 3.0}], append=True)
    assert [r["x"] for r in read_metrics(path)] == [1.0, 2.0, 3.0]


# ---------------------------------------------------------------- the writer
def test_writer_escapes_only_what_a_line_splitter_would_cut():
    line = dumps_line({"q": "ß\x85\u2028\u2029\x0b\x1c\r\n\ud800"})
    assert line == '{"q": "ß\\u0085\\u2028\\u2029\\u000b\\u001c\\r\\n\\ud800"}\n'  # ß stays readable
    assert loads_jsonl(line) == [{"q": "ß\x85\u2028\u2029\x0b\x1c\r\n\ud800"}]  # a lone surrogate encodes, too
    assert dumps_line({"a": [1, 2]}, compact=True) == '{"a":[1,2]}\n'
    assert dumps_line({"x": Path("p")}, default=str) == '{"x": "p"}\n'


def test_atomic_write_keeps_the_old_file_when_a_record_fails(tmp_path):
    path = write_jsonl(tmp_path / "e.jsonl", [{"a": 1}], atomic=True)
    with pytest.raises(TypeError):
        write_jsonl(path, [{"a": 2}, {"b": object()}], atomic=True)
    assert load_jsonl(path) == [{"a": 1}] and [p.name for p in tmp_path.iterdir()] == ["e.jsonl"]


# ---------------------------------------------------------------- regression: the routing-log importer
def test_routing_log_question_with_nel_loads_back_exactly(tmp_path):
    """A public benchmark's question holds U+0085 (NEL): the importer wrote it, and load_tasks cut the line there."""
    from orchestra.data.tasks import load_tasks

    question = "Which of these is prime?\x85(A) 21 (B) 23\u2028Answer with the letter."
    (tmp_path / "log.csv").write_text(
        "id,prompt,answer,m1|response,m1|correct,m2|response,m2|correct\n"
        f'q1,"{question}",B,B,true,A,false\n'
        "q2,What is 2+2?,4,4,true,5,false\nq3,x,1,1,true,1,true\nq4,y,2,2,false,2,true\nq5,z,3,3,true,3,true\n",
        encoding="utf-8", newline="")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "cluster.routing_log", str(tmp_path / "log.csv"), "--out", str(out),
                          "--price", "m1=1,2", "--price", "m2=3,4"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    tasks = {t.id: t for t in load_tasks(out / "tasks.jsonl")}
    assert len(tasks) == 5 and tasks["q1"].problem == question
    assert _lines(out / "tasks.jsonl") == 5
