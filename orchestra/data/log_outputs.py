"""A checked routing log (routing_log.py) -> the project's own formats: tasks, replay files, presets, in one move.

`write_outputs(log, out, files)` writes, into a temporary directory renamed into place (nothing partial is ever left):
  tasks.jsonl            Task rows (orchestra/data/tasks.py); task id = question id = the replay key
  replay/<expert>.jsonl  RouterArena's cached-results rows, the recorded-outputs format tools/experts/replay.py
                         reads: tokens and $ as recorded, correct iff score >= 0.5, a null answer where none was
  zoo.yaml, experiment.yaml, ...  the caller's texts, written as given (cluster/routing_log.py makes presets that
                         work from anywhere: `experiment=<dir>/experiment.yaml`, paths absolute)
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from orchestra.data.routing_log import Call, Question, RoutingLog, RoutingLogError
from orchestra.jsonl import write_jsonl
from orchestra.types import Task


def expert_key(model: str) -> str:
    """A model name as a zoo expert key and a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") or "model"


def replay_row(q: Question, call: Call) -> dict[str, Any]:
    """RouterArena's cached-results shape (tools/experts/replay.py `_router_arena`)."""
    row: dict[str, Any] = {"global_index": q.id, "question": q.prompt, "generated_answer": call.response,
                           "evaluation_result": {"extracted_answer": call.model_answer, "ground_truth": q.answer,
                                                 "score": call.score, "inference_cost": call.cost_usd}}
    if call.tokens_in is not None and call.tokens_out is not None:
        row["token_usage"] = {"input_tokens": call.tokens_in, "output_tokens": call.tokens_out,
                              "total_tokens": call.tokens_in + call.tokens_out}
    return row


def task_of(q: Question, name: str) -> Task:
    meta: dict[str, Any] = {"question_id": q.id}
    if q.category:
        meta["family"] = q.category
    return Task(id=q.id, problem=q.prompt, answer=q.answer or "", category="qa", data_source=f"routing_log/{name}",
                tools=["answer"], meta=meta)


def write_outputs(log: RoutingLog, out: str | Path, files: dict[str, str], force: bool = False) -> Path:
    """Write tasks.jsonl, replay/<expert>.jsonl and the presets (`files`: name -> YAML text, written as is) into a
    temporary directory beside `out`, then rename it to `out` (an existing `out` is replaced only with `force`)."""
    out = Path(out).resolve()
    if out.exists() and not force:
        raise RoutingLogError(f"output directory {out} exists (pass --force to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (tmp / "replay").mkdir()
        name = out.name
        write_jsonl(tmp / "tasks.jsonl", (task_of(q, name).to_dict() for q in log.questions))
        for m in log.models:
            write_jsonl(tmp / "replay" / f"{expert_key(m)}.jsonl", (replay_row(q, q.calls[m]) for q in log.questions))
        for fname, text in files.items():
            (tmp / fname).write_text(text, encoding="utf-8")
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
            os.replace(out, old / "d")
        os.replace(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
