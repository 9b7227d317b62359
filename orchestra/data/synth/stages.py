"""ToolScale stages: domain -> subjects/tables -> DB schema -> records -> tools -> tasks -> evolve, and
the step both modes share: validated stage outputs -> func_call Task rows.

`template_domain(seed, name)` builds the stages offline and deterministically for a few small built-in
domains (a library, a clinic, a bike shop): schema, seeded records, tools (get / find / update specs over
the DB, see validation.py) and tasks with gold actions; `evolve` makes harder variants by chaining a find
before a get or an update before a get. `to_tasks(domain)` validates every task (gold actions replay, answer
in the last output) and emits Task rows with the DB, tool specs and gold actions in meta; rejected items are
returned with their reasons. teacher.py produces the same `Domain` from an LLM; cluster/synth.py writes files.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from orchestra.data.synth import validation as V
from orchestra.types import Task

FIRST = ["Ada", "Bo", "Cyd", "Dina", "Emil", "Fern", "Gio", "Hale", "Iris", "Jon", "Kira", "Lou"]
LAST = ["Marsh", "Nolan", "Ortiz", "Park", "Quill", "Reyes", "Stone", "Tamm", "Udal", "Vance"]
BUILTIN = {
    "library": {"subjects": ["members", "books"], "schema": {"tables": {
        "members": {"key": "member_id", "fields": {"member_id": "str", "name": "str", "email": "str", "tier": "str"}},
        "books": {"key": "book_id", "fields": {"book_id": "str", "title": "str", "borrower": "str", "due_day": "int"}}}}},
    "clinic": {"subjects": ["patients", "appointments"], "schema": {"tables": {
        "patients": {"key": "patient_id", "fields": {"patient_id": "str", "name": "str", "phone": "str", "plan": "str"}},
        "appointments": {"key": "appt_id", "fields": {"appt_id": "str", "patient": "str", "doctor": "str", "day": "int"}}}}},
    "bikeshop": {"subjects": ["customers", "rentals"], "schema": {"tables": {
        "customers": {"key": "customer_id", "fields": {"customer_id": "str", "name": "str", "city": "str", "level": "str"}},
        "rentals": {"key": "rental_id", "fields": {"rental_id": "str", "customer": "str", "bike": "str", "hours": "int"}}}}},
}


@dataclass
class Domain:
    name: str
    subjects: list[str]
    schema: dict[str, Any]
    db: dict[str, dict[str, dict[str, Any]]]  # table -> key -> record
    tools: list[dict[str, Any]]
    tasks: list[dict[str, Any]] = field(default_factory=list)  # {scenario, actions, answer, difficulty}
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (stage, reason)


def _records(name: str, rng: random.Random, n: int) -> dict[str, list[dict[str, Any]]]:
    people = [f"{rng.choice(FIRST)} {rng.choice(LAST)}" for _ in range(n)]
    pid = [f"{name[0].upper()}{100 + i}" for i in range(n)]
    if name == "library":
        return {"members": [{"member_id": pid[i], "name": people[i], "email": f"{people[i].split()[0].lower()}{i}@lib.example",
                             "tier": rng.choice(["basic", "gold"])} for i in range(n)],
                "books": [{"book_id": f"B{200 + i}", "title": f"{rng.choice(['Quiet', 'Red', 'Lost', 'Tidal'])} "
                           f"{rng.choice(['Harbor', 'Orchard', 'Signal', 'Atlas'])} {i}", "borrower": rng.choice(pid),
                           "due_day": rng.randint(1, 28)} for i in range(n)]}
    if name == "clinic":
        return {"patients": [{"patient_id": pid[i], "name": people[i], "phone": f"555-{rng.randint(1000, 9999)}",
                              "plan": rng.choice(["basic", "plus"])} for i in range(n)],
                "appointments": [{"appt_id": f"A{300 + i}", "patient": rng.choice(pid),
                                  "doctor": f"Dr. {rng.choice(LAST)}", "day": rng.randint(1, 28)} for i in range(n)]}
    return {"customers": [{"customer_id": pid[i], "name": people[i], "city": rng.choice(["Lyon", "Oslo", "Quito"]),
                           "level": rng.choice(["new", "regular"])} for i in range(n)],
            "rentals": [{"rental_id": f"R{400 + i}", "customer": rng.choice(pid), "bike": rng.choice(["road", "cargo", "city"]),
                         "hours": rng.randint(1, 12)} for i in range(n)]}


def default_tools(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """get_<entity> for every table, find_<table>_by_<field> for the first non-key field after the key,
    update_<entity>_<field> for the last field."""
    out = []
    for table, t in schema["tables"].items():
        entity = table.rstrip("s")
        fields = [f for f in t["fields"] if f != t["key"]]
        out.append({"name": f"get_{entity}", "kind": "get", "table": table,
                    "description": f"Look up one {entity} by its {t['key']}."})
        out.append({"name": f"find_{table}_by_{fields[0]}", "kind": "find", "table": table, "field": fields[0],
                    "description": f"List the {t['key']}s of {table} whose {fields[0]} equals a value."})
        out.append({"name": f"update_{entity}_{fields[-1]}", "kind": "update", "table": table, "field": fields[-1],
                    "description": f"Set the {fields[-1]} of one {entity}."})
    return out


def _template_tasks(d: Domain, rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Difficulty 1: one get. Difficulty 2: update then get (the answer is the new value)."""
    tasks = []
    tables = list(d.schema["tables"])
    for _ in range(n):
        table = rng.choice(tables)
        t = d.schema["tables"][table]
        entity = table.rstrip("s")
        key = rng.choice(sorted(d.db[table]))
        f = rng.choice([x for x in t["fields"] if x != t["key"]])
        get = {"name": f"get_{entity}", "arguments": {"key": key}}
        if rng.random() < 0.5:
            tasks.append({"scenario": f"What is the {f} of {entity} {key}?", "actions": [get],
                          "answer": str(d.db[table][key][f]), "difficulty": 1})
        else:
            upd = next(s for s in d.tools if s["kind"] == "update" and s["table"] == table)
            ty = t["fields"][upd["field"]]
            value = rng.randint(1, 28) if ty == "int" else f"{upd['field']}-{rng.randint(10, 99)}"
            tasks.append({"scenario": f"Set the {upd['field']} of {entity} {key} to {value}, then confirm it.",
                          "actions": [{"name": upd["name"], "arguments": {"key": key, "value": value}}, get],
                          "answer": str(value), "difficulty": 2})
    return tasks


def evolve(d: Domain, task: dict[str, Any]) -> dict[str, Any] | None:
    """A harder variant: reach a difficulty-1 get through a find on the other table's foreign reference.
    Returns None when the record cannot be singled out that way (the find would return several keys)."""
    if task.get("difficulty") != 1:
        return None
    get = task["actions"][0]
    table = next(tb for tb in d.schema["tables"] if f"get_{tb.rstrip('s')}" == get["name"])
    find = next((s for s in d.tools if s["kind"] == "find" and s["table"] == table), None)
    if find is None:
        return None
    value = d.db[table][str(get["arguments"]["key"])][find["field"]]
    if [k for k, r in d.db[table].items() if r[find["field"]] == value] != [str(get["arguments"]["key"])]:
        return None
    what = task["scenario"].split(" of ")[0].removeprefix("What is the ")
    return {"scenario": f"Find the {table.rstrip('s')} whose {find['field']} is {value!r} and tell me its {what}.",
            "actions": [{"name": find["name"], "arguments": {"value": value}}, get], "answer": task["answer"],
            "difficulty": 3}


def template_domain(seed: int, name: str, n_records: int = 8, n_tasks: int = 12) -> Domain:
    if name not in BUILTIN:
        raise ValueError(f"unknown template domain {name!r}; choose one of {sorted(BUILTIN)}")
    rng = random.Random(f"domain:{name}:{seed}")
    spec = BUILTIN[name]
    rows = _records(name, rng, n_records)
    d = Domain(name, list(spec["subjects"]), spec["schema"], V.index_db(spec["schema"], rows),
               default_tools(spec["schema"]))
    d.tasks = _template_tasks(d, rng, n_tasks)
    d.tasks += [v for v in (evolve(d, t) for t in list(d.tasks)) if v is not None]
    return d


def to_tasks(d: Domain, mapping: dict[str, str] | None = None, pref: dict[str, float] | None = None,
             id_prefix: str = "") -> tuple[list[Task], list[tuple[str, str]]]:
    """Validated func_call Tasks and (stage, reason) rejections (the domain's own plus failed tasks)."""
    rejected = list(d.rejected)
    good_tools = []
    for spec in d.tools:
        reason = V.check_tool_spec(spec, d.schema) or V.try_tool(spec, d.schema, d.db)
        (rejected.append(("tools", reason)) if reason else good_tools.append(spec))
    out, seen = [], set()
    for i, t in enumerate(d.tasks):
        reason = V.check_task(t, d.db, d.schema, good_tools)
        if reason is None and t["scenario"] in seen:
            reason = "duplicate scenario"
        if reason:
            rejected.append(("tasks", f"task {i}: {reason}"))
            continue
        seen.add(t["scenario"])
        tools = [{**s, "parameters": V.tool_parameters(s, d.schema)} for s in good_tools]
        out.append(Task(id=f"{id_prefix}{d.name}-{i:04d}", problem=t["scenario"], answer=str(t["answer"]),
                        category="func_call", data_source=f"synthetic/func_call/{d.name}",
                        tools=[s["name"] for s in good_tools] + ["answer"], model_mapping=dict(mapping or {}),
                        pref=dict(pref or {}),
                        meta={"family": "func_call", "domain": d.name, "difficulty": int(t.get("difficulty", 1)),
                              "db": d.db, "schema": d.schema, "tool_specs": tools, "gold_actions": t["actions"]}))
    return out, rejected
