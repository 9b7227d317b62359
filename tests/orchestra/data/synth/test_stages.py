"""ToolScale stages (orchestra/data/synth/stages.py, validation.py), teacher mode against a fake OpenAI server on
127.0.0.1, and the `cluster.synth` CLI."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestra.data.synth import validation as V
from orchestra.data.synth.stages import BUILTIN, default_tools, template_domain, to_tasks
from orchestra.data.tasks import load_tasks


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_template_domains_deterministic_and_replay(name):
    a, b = template_domain(5, name), template_domain(5, name)
    assert a.db == b.db and a.tasks == b.tasks
    assert template_domain(6, name).db != a.db
    tasks, rejected = to_tasks(a, {"answer-1": "gpt-5"})
    assert len(tasks) >= 8 and all(r[1].endswith("duplicate scenario") for r in rejected)
    assert {t.meta["difficulty"] for t in tasks} >= {1, 2}
    for t in tasks:
        assert t.category == "func_call" and t.data_source == f"synthetic/func_call/{name}"
        outputs, final = V.replay_actions(t.meta["db"], t.meta["schema"], t.meta["tool_specs"], t.meta["gold_actions"])
        last = outputs[-1]
        assert t.answer in [str(v) for v in last.values()]
        if any(a["name"].startswith("update_") for a in t.meta["gold_actions"]):
            assert final != t.meta["db"]  # the update really changed the DB copy ...
        assert template_domain(5, name).db == t.meta["db"]  # ... and never the original


def test_validation_reasons():
    schema = BUILTIN["library"]["schema"]
    assert V.check_schema(schema) is None
    assert "key" in V.check_schema({"tables": {"x": {"key": "id", "fields": {"name": "str"}}}})
    assert "types" in V.check_schema({"tables": {"x": {"key": "id", "fields": {"id": "uuid"}}}})
    rows = {"members": [{"member_id": "M1", "name": "A", "email": "a@x", "tier": "gold"}],
            "books": [{"book_id": "B1", "title": "T", "borrower": "M1", "due_day": "soon"}]}
    assert "not int" in V.check_records(schema, rows)
    rows["books"][0]["due_day"] = 3
    assert V.check_records(schema, rows) is None
    db = V.index_db(schema, rows)
    tools = default_tools(schema)
    assert V.replay_actions(db, schema, tools, [{"name": "get_book", "arguments": {"key": "B9"}}]).endswith("key 'B9'")
    assert "unknown tool" in V.replay_actions(db, schema, tools, [{"name": "rm_rf", "arguments": {}}])
    assert "missing required" in V.replay_actions(db, schema, tools, [{"name": "get_book", "arguments": {}}])
    find_due = {"name": "find_books_by_due_day", "kind": "find", "table": "books", "field": "due_day", "description": "d"}
    assert V.try_tool(find_due, schema, db) is None
    bad_db = V.index_db(schema, {**rows, "books": [{**rows["books"][0], "due_day": "soon"}]})  # skipped check_records
    assert "failed on a sample call" in V.try_tool(find_due, schema, bad_db)
    assert "kind" in V.check_tool_spec({"name": "drop", "kind": "delete", "table": "books", "description": "d"}, schema)
    assert V.parse_json("```json\n{\"a\": 1}\n```") == ({"a": 1}, None)
    assert V.parse_json("{oops")[1].startswith("malformed JSON")


# ---------------------------------------------------------------- teacher mode against a fake endpoint
def _canned() -> dict[str, list[str]]:
    d = template_domain(0, "library", n_records=3, n_tasks=0)
    rows = {t: list(recs.values()) for t, recs in d.db.items()}
    key = sorted(d.db["books"])[0]
    task = {"scenario": f"Who borrowed book {key}?", "actions": [{"name": "get_book", "arguments": {"key": key}}],
            "answer": d.db["books"][key]["borrower"], "difficulty": 1}
    wrong = {"scenario": "Due day?", "actions": [{"name": "get_book", "arguments": {"key": key}}], "answer": "never"}
    harder = {"scenario": f"Find {key} by title then tell me who has it.", "difficulty": 3, "answer": task["answer"],
              "actions": [{"name": "find_books_by_title", "arguments": {"value": d.db["books"][key]["title"]}},
                          {"name": "get_book", "arguments": {"key": key}}]}
    return {"domain": [json.dumps({"name": "library", "subjects": ["members", "books"]})],
            "schema": ["{\"tables\": {\"members\": ", "```json\n" + json.dumps(d.schema) + "\n```"],
            "records": [json.dumps(rows)], "tools": [json.dumps(default_tools(d.schema))],
            "tasks": [json.dumps([task, wrong])], "evolve": [json.dumps(harder)]}


@pytest.fixture
def fake_openai():
    replies, seen = _canned(), []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = body["messages"][0]["content"]
            stage = prompt.split("Stage: ", 1)[1].split(".", 1)[0]
            seen.append((stage, self.headers.get("Authorization")))
            queue = replies[stage]
            text = queue.pop(0) if len(queue) > 1 else queue[0]
            out = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "stop",
                                           "message": {"role": "assistant", "content": text}}],
                              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", seen
    server.shutdown()
    server.server_close()


def test_teacher_mode(fake_openai, monkeypatch, caplog):
    from orchestra.data.synth.teacher import Teacher

    url, seen = fake_openai
    monkeypatch.setenv("SYNTH_TEST_KEY", "sk-secret-123")
    teacher = Teacher(url, "teacher-model", api_key_env="SYNTH_TEST_KEY", timeout_s=10, retries=1)
    d = teacher.build_domain("library", n_records=3, n_tasks=2)
    stages = [s for s, _ in seen]
    assert stages == ["domain", "schema", "schema", "records", "tools", "tasks", "evolve"]
    assert seen[0][1] == "Bearer sk-secret-123"
    reasons = dict((s, r) for s, r in d.rejected)
    assert reasons["schema"].startswith("malformed JSON")  # first schema reply was cut off, then retried
    assert "'never' is not in the last action's output" in reasons["tasks"]
    tasks, rejected = to_tasks(d)
    assert [t.meta["difficulty"] for t in tasks] == [1, 3]
    for t in tasks:
        assert not isinstance(V.replay_actions(t.meta["db"], t.meta["schema"], t.meta["tool_specs"], t.meta["gold_actions"]), str)
    assert "sk-secret-123" not in caplog.text


def test_cli_template(tmp_path):
    from cluster.synth import run

    counts = run({"mode": "template", "n": "12", "out": str(tmp_path), "domains": "library"})
    tasks = load_tasks(tmp_path / "tasks.jsonl")
    assert counts["tasks"] == len(tasks) == 12 + counts["func_call"] and counts["func_call"] >= 8
    assert [t.to_dict() for t in load_tasks(tmp_path / "tasks.parquet")] == [t.to_dict() for t in tasks]
    assert (tmp_path / "verl.parquet").stat().st_size > 0 and (tmp_path / "tasks.corpus.jsonl").stat().st_size > 0
