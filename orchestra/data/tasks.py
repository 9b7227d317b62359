"""Task-set I/O: Task rows as JSONL or parquet, verl parquet rows, and building train/held-out sets from config.

- `save_tasks` / `load_tasks`: the format follows the suffix (.jsonl, .parquet). In parquet the nested,
  free-form fields (pref, model_mapping, pricing, meta) are JSON strings, because their keys and value types
  differ between rows and parquet structs cannot hold that; `load_tasks` decodes them back.
- `to_verl_rows` / `save_verl_parquet`: verl's RL dataset rows (`prompt` chat messages, `data_source`,
  `reward_model.ground_truth`, `extra_info` with P, tools_kwargs and the whole task). In the parquet file
  `extra_info.task` and `extra_info.pref` are JSON strings for the same reason; `task_from_verl_row` reads
  either shape. The prompt the policy really sees is rendered by our agent loop from the task, not from `prompt`.
- `build_task_set(data_cfg, tiers)`: DataConfig.source = "template" | path to a Task file |
  "loader:<name>:<path>" (orchestra.data.loaders) -> (train, heldout, corpus).
Generation lives in orchestra.data.synth; benchmark readers in orchestra.data.loaders.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

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
        with path.open("w") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
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
        rows = []
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from None
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
    with path.open("w") as f:
        for p in passages:
            f.write(json.dumps({"id": p["id"], "title": p.get("title", ""), "text": p["text"]},
                               ensure_ascii=False) + "\n")
    return path


def load_corpus(path: str | Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


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


# ---------------------------------------------------------------- from config
def split_tasks(tasks: list[Task], n_train: int, n_heldout: int, seed: int) -> tuple[list[Task], list[Task]]:
    """Deterministic disjoint split of a loaded set: shuffle by seed, held-out first, then train."""
    order = list(tasks)
    random.Random(f"split:{seed}").shuffle(order)
    heldout = order[:n_heldout]
    train = order[n_heldout:n_heldout + n_train]
    if not train:
        raise ValueError(f"only {len(tasks)} tasks: nothing left for training after {n_heldout} held out")
    return train, heldout


def build_task_set(data_cfg: Any, tiers: dict[str, str] | None = None
                   ) -> tuple[list[Task], list[Task], list[dict[str, str]]]:
    """(train, heldout, corpus) from DataConfig (source, n_train, n_heldout, families, seed, preference)."""
    source = str(data_cfg.source)
    families = list(data_cfg.families) or None
    if source == "template":
        from orchestra.data.synth.template import generate_tasks

        train = generate_tasks(data_cfg.n_train, data_cfg.seed, families, "train", mapping=tiers)
        held = generate_tasks(data_cfg.n_heldout, data_cfg.seed, families, "heldout", mapping=tiers)
        corpus = {p["id"]: p for p in train.corpus + held.corpus}
        return _with_preference(train.tasks, data_cfg), held.tasks, list(corpus.values())
    if source.startswith("tau2:"):  # τ²-bench domains (the `tau2` extra); the domain DB is the "corpus"
        from orchestra.tau2.domain import load_tasks as load_tau2
        from orchestra.tau2.evaluation import parse_dataset

        tasks, corpus = load_tau2(**parse_dataset(source)), []
    elif source.startswith("loader:"):
        from orchestra.data.loaders import load

        _, name, path = (source.split(":", 2) + [""])[:3]
        loaded = load(name, path, mapping=tiers)
        tasks, corpus = loaded.tasks, loaded.corpus
    else:
        path = Path(source)
        tasks = load_tasks(path)
        side = path.with_name(path.name.split(".")[0] + ".corpus.jsonl")
        corpus = load_corpus(side) if side.is_file() else []
    if families:
        tasks = [t for t in tasks if t.meta.get("family") in families]
    if tiers:
        for t in tasks:
            t.model_mapping = t.model_mapping or dict(tiers)
    train, heldout = split_tasks(tasks, data_cfg.n_train, data_cfg.n_heldout, data_cfg.seed)
    return _with_preference(train, data_cfg), heldout, corpus


def _with_preference(train: list[Task], data_cfg: Any) -> list[Task]:
    """`data.preference`: `sampled` keeps each task's own vector and draws one (seeded by the task id, as
    ToolOrchestra) for tasks that came without (benchmark loaders, files); a preset name or
    `accuracy=1,cost=0.5` gives every training task that one vector; `A|B|...` (presets or weight strings)
    gives each task one of them, drawn seeded by the task id, so training covers exactly the trade-offs an
    evaluation compares."""
    from orchestra.preferences import parse_preference, sample_preference

    spec = str(getattr(data_cfg, "preference", "sampled"))
    seed = getattr(data_cfg, "seed", 0)
    if spec == "sampled":
        for t in train:
            if not t.pref:  # an empty vector weighs nothing: every episode would score 0
                t.pref = sample_preference(random.Random(f"pref:{seed}:{t.id}"), list(t.model_mapping))
        return train
    choices = [parse_preference(part) for part in spec.split("|")]
    for t in train:
        pick = choices[0] if len(choices) == 1 else random.Random(f"pref:{seed}:{t.id}").choice(choices)
        t.pref = dict(pick)
    return train
