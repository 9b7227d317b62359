"""Task-set I/O: Task rows as JSONL or parquet, verl parquet rows, and building train/held-out sets from config.

- `save_tasks` / `load_tasks`: the format follows the suffix (.jsonl, .parquet). In parquet the nested,
  free-form fields (pref, model_mapping, pricing, meta) are JSON strings, because their keys and value types
  differ between rows and parquet structs cannot hold that; `load_tasks` decodes them back.
- `to_verl_rows` / `save_verl_parquet`: verl's RL dataset rows (`prompt` chat messages, `data_source`,
  `reward_model.ground_truth`, `extra_info` with P, tools_kwargs and the whole task). In the parquet file
  `extra_info.task` and `extra_info.pref` are JSON strings for the same reason; `task_from_verl_row` reads
  either shape. The prompt the policy really sees is rendered by our agent loop from the task, not from `prompt`.
Which source a task set comes from, and its train / held-out split, is orchestra/data/sources.py; generation
lives in orchestra.data.synth; benchmark readers in orchestra.data.loaders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestra.jsonl import load_jsonl, write_jsonl
from orchestra.types import Task

_JSON_FIELDS = ("tools", "model_mapping", "pricing", "pref", "meta")


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise ValueError(f"{path}: task files must end in .jsonl or .parquet")
    return suffix


def save_tasks(tasks: list[Task], path: str | Path) -> Path:
    path = Path(path)
    suffix = _suffix(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [t.to_dict() for t in tasks]
    if suffix == ".jsonl":
        write_jsonl(path, rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        flat = [{k: (json.dumps(v, ensure_ascii=False) if k in _JSON_FIELDS else v) for k, v in r.items()}
                for r in rows]
        pq.write_table(pa.Table.from_pylist(flat), path)
    return path


def load_tasks(path: str | Path) -> list[Task]:
    """Read Task rows; a malformed row raises ValueError naming the file and line/row."""
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise FileNotFoundError(f"task file {path} does not exist")
    if suffix == ".jsonl":
        rows = load_jsonl(path)  # a bad line: ValueError `path:line: not JSON (...)`
    else:
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
        rows = [{k: (json.loads(v) if k in _JSON_FIELDS and isinstance(v, str) else v) for k, v in r.items()}
                for r in rows]
    tasks = []
    for n, row in enumerate(rows, 1):
        try:
            tasks.append(Task.from_dict(row))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{path}: row {n}: {e}") from None
    return tasks


def save_corpus(passages: list[dict[str, str]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_jsonl(path, ({"id": p["id"], "title": p.get("title", ""), "text": p["text"]} for p in passages))


def load_corpus(path: str | Path) -> list[dict[str, str]]:
    return load_jsonl(path)


# ---------------------------------------------------------------- verl rows
def to_verl_rows(tasks: list[Task], split: str = "train", agent_name: str | None = None) -> list[dict[str, Any]]:
    """verl RL dataset rows; `agent_name` (the registered agent loop) is added when given."""
    rows = []
    for i, t in enumerate(tasks):
        row: dict[str, Any] = {
            "data_source": t.data_source,
            "prompt": [{"role": "user", "content": t.problem}],
            "ability": t.meta.get("family", t.category),
            "reward_model": {"style": "rule", "ground_truth": t.answer},
            "extra_info": {"index": i, "split": split, "task_id": t.id, "pref": dict(t.pref),
                           "tools_kwargs": {name: {"create_kwargs": {"task_id": t.id}} for name in t.tools},
                           "task": t.to_dict()},
        }
        if agent_name:
            row["agent_name"] = agent_name
        rows.append(row)
    return rows


def save_verl_parquet(tasks: list[Task], path: str | Path, split: str = "train",
                      agent_name: str | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = to_verl_rows(tasks, split, agent_name)
    for row in rows:
        extra = row["extra_info"]
        extra["task"] = json.dumps(extra["task"], ensure_ascii=False)
        extra["pref"] = json.dumps(extra["pref"])
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def task_from_verl_row(row: dict[str, Any]) -> Task:
    """The Task inside a verl row (its extra_info), from to_verl_rows (dict) or a parquet file (JSON)."""
    extra = row.get("extra_info") or {}
    task = extra.get("task")
    if task is None:
        raise ValueError("verl row has no extra_info.task; was it written by orchestra.data.tasks?")
    return Task.from_dict(json.loads(task) if isinstance(task, str) else task)
