"""Checks every synthesized item passes before it becomes a task (ToolScale stages, orchestra/data/synth/stages.py).

Each `check_*` returns None when the item is fine, else a one-line reason (the pipeline logs and counts it).
Nothing here raises on bad *content*; a bad reason is data. Tools are declarative specs executed by
`execute` over an in-memory DB (dict table -> {key -> record}), so a teacher model's output is never run as code:
  get     {table, args: {key}}                      -> the record
  find    {table, field, args: {value}}             -> keys of records whose `field` == value (sorted)
  update  {table, field, args: {key, value}}        -> the updated record (mutates the DB)
`replay_actions(db, tools, actions)` runs gold actions on a copy and returns (outputs, final db) or a reason.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from orchestra.schema import check_arguments  # the same JSON-schema check as real tools

TYPES = {"str": str, "int": int, "float": (int, float), "bool": bool}
SPEC_KINDS = ("get", "find", "update")
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")


def parse_json(text: str) -> tuple[Any, str | None]:
    """JSON from a model reply (a ```json fence is allowed); (value, None) or (None, reason)."""
    body = text.strip()
    fence = re.search(r"```(?:json)?\s*\n(.*?)```", body, re.S)
    if fence:
        body = fence.group(1)
    try:
        return json.loads(body), None
    except json.JSONDecodeError as e:
        return None, f"malformed JSON: {e.msg} at line {e.lineno} col {e.colno}"


def check_schema(schema: Any) -> str | None:
    """{"tables": {name: {"key": field, "fields": {field: type}}}}"""
    if not isinstance(schema, dict) or not isinstance(schema.get("tables"), dict) or not schema["tables"]:
        return "schema must be an object with a non-empty 'tables' object"
    for name, t in schema["tables"].items():
        if not _NAME.match(str(name)):
            return f"table name {name!r} is not snake_case"
        if not isinstance(t, dict) or not isinstance(t.get("fields"), dict) or not t["fields"]:
            return f"table {name!r} needs a non-empty 'fields' object"
        if t.get("key") not in t["fields"]:
            return f"table {name!r}: key {t.get('key')!r} is not one of its fields"
        bad = {f: ty for f, ty in t["fields"].items() if ty not in TYPES}
        if bad:
            return f"table {name!r}: unknown field types {bad}; use {sorted(TYPES)}"
    return None


def check_records(schema: dict[str, Any], db: Any) -> str | None:
    """db = {table: [records]} with every field of the right type and unique keys."""
    if not isinstance(db, dict):
        return "records must be an object {table: [records]}"
    for name, t in schema["tables"].items():
        rows = db.get(name)
        if not isinstance(rows, list) or not rows:
            return f"table {name!r} has no records"
        keys = set()
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or set(row) != set(t["fields"]):
                return f"{name}[{i}]: fields {sorted(row) if isinstance(row, dict) else row!r} != schema {sorted(t['fields'])}"
            for f, ty in t["fields"].items():
                if not isinstance(row[f], TYPES[ty]) or (ty != "bool" and isinstance(row[f], bool)):
                    return f"{name}[{i}].{f}: {row[f]!r} is not {ty}"
            if row[t["key"]] in keys:
                return f"{name}[{i}]: duplicate key {row[t['key']]!r}"
            keys.add(row[t["key"]])
    return None


def index_db(schema: dict[str, Any], rows: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    return {name: {str(r[t["key"]]): dict(r) for r in rows[name]} for name, t in schema["tables"].items()}


def tool_parameters(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of a tool's arguments, derived from its kind and the DB schema."""
    t = schema["tables"][spec["table"]]
    key_type = "integer" if t["fields"][t["key"]] == "int" else "string"
    json_type = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
    if spec["kind"] == "get":
        props = {"key": {"type": key_type}}
    elif spec["kind"] == "find":
        props = {"value": {"type": json_type[t["fields"][spec["field"]]]}}
    else:
        props = {"key": {"type": key_type}, "value": {"type": json_type[t["fields"][spec["field"]]]}}
    return {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False}


def check_tool_spec(spec: Any, schema: dict[str, Any]) -> str | None:
    if not isinstance(spec, dict) or not _NAME.match(str(spec.get("name", ""))):
        return f"tool needs a snake_case 'name': {spec!r}"[:200]
    if spec.get("kind") not in SPEC_KINDS:
        return f"tool {spec.get('name')}: kind {spec.get('kind')!r} not in {SPEC_KINDS}"
    table = schema["tables"].get(spec.get("table"))
    if table is None:
        return f"tool {spec['name']}: unknown table {spec.get('table')!r}"
    if spec["kind"] != "get" and spec.get("field") not in table["fields"]:
        return f"tool {spec['name']}: unknown field {spec.get('field')!r} of {spec['table']}"
    if spec["kind"] == "update" and spec.get("field") == table["key"]:
        return f"tool {spec['name']}: may not update the key field"
    if not str(spec.get("description", "")).strip():
        return f"tool {spec['name']}: empty description"
    return None


def execute(spec: dict[str, Any], schema: dict[str, Any], db: dict[str, dict[str, dict[str, Any]]],
            args: dict[str, Any]) -> tuple[Any, str | None]:
    """Run one tool call on `db` (mutating for update): (output, None) or (None, error)."""
    err = check_arguments(tool_parameters(spec, schema), args)
    if err:
        return None, f"{spec['name']}: {err}"
    rows = db[spec["table"]]
    if spec["kind"] == "find":
        return sorted(k for k, r in rows.items() if r[spec["field"]] == args["value"]), None
    row = rows.get(str(args["key"]))
    if row is None:
        return None, f"{spec['name']}: no {spec['table']} with key {args['key']!r}"
    if spec["kind"] == "update":
        row[spec["field"]] = args["value"]
    return dict(row), None


def try_tool(spec: dict[str, Any], schema: dict[str, Any], db: dict[str, Any]) -> str | None:
    """Execute a tool once on a copy of db with arguments taken from its first record: it must run."""
    rows = db.get(spec["table"]) or {}
    if not rows:
        return f"tool {spec['name']}: table {spec['table']} has no records to try it on"
    key = sorted(rows)[0]
    row = rows[key]
    t = schema["tables"][spec["table"]]
    key_arg = row[t["key"]]
    args = {"get": {"key": key_arg}, "find": {"value": row.get(spec.get("field"))},
            "update": {"key": key_arg, "value": row.get(spec.get("field"))}}[spec["kind"]]
    _out, err = execute(spec, schema, copy.deepcopy(db), args)
    return f"tool {spec['name']} failed on a sample call: {err}" if err else None


def replay_actions(db: dict[str, Any], schema: dict[str, Any], tools: list[dict[str, Any]],
           actions: Any) -> tuple[list[Any], dict[str, Any]] | str:
    """Run gold actions [{name, arguments}] on a copy of db; (outputs, final db) or the reason it failed."""
    if not isinstance(actions, list) or not actions:
        return "gold actions must be a non-empty list"
    by_name = {t["name"]: t for t in tools}
    state, outputs = copy.deepcopy(db), []
    for i, act in enumerate(actions):
        if not isinstance(act, dict) or act.get("name") not in by_name:
            return f"action {i}: unknown tool {act.get('name') if isinstance(act, dict) else act!r}"
        out, err = execute(by_name[act["name"]], schema, state, act.get("arguments") or {})
        if err:
            return f"action {i}: {err}"
        outputs.append(out)
    return outputs, state


def check_task(task: Any, db: dict[str, Any], schema: dict[str, Any], tools: list[dict[str, Any]]) -> str | None:
    """{scenario, actions, answer}: actions replay, and the answer appears in the last action's output."""
    if not isinstance(task, dict) or not str(task.get("scenario", "")).strip():
        return "task needs a non-empty 'scenario'"
    got = replay_actions(db, schema, tools, task.get("actions"))
    if isinstance(got, str):
        return got
    answer = str(task.get("answer", "")).strip()
    if not answer:
        return "task has no answer"
    last = got[0][-1]
    values = [str(v) for v in (last.values() if isinstance(last, dict) else last)]
    if answer not in values:
        return f"answer {answer!r} is not in the last action's output {values[:8]}"
    return None
