"""Routing logs -> a task set and a replay zoo: read and check a log, then write the project's own formats.

A routing log records what several models answered to the same questions. Three layouts are read, from CSV, JSONL,
a JSON list or parquet (found from the columns; `models=[...]` names the model columns where they can't be found):
* long: one row per (question, model), with a `model` column;
* wide: one row per question, each model's fields in columns `<model>|<field>` (RouterBench's layout);
* by model: one row per question, column `<model>` = that model's verdict and `<model>_<field>` its other fields
  (RouteLLM's: `<model>_response`; its MMLU files have only the verdict columns, found as all-true/false columns).
Fields (input column names can be mapped, `columns={"prompt": "question"}`):
  id          question id; optional. Without one it is `q` + the first 12 hex digits of sha1(prompt), so ids
              stay stable when rows are reordered or the log grows
  prompt      required
  answer      the gold answer; optional when every model's `correct` is given
  category    optional: the task family (per-family reports, the routers' family feature); without a mapping the
              first column named category, family, subject or domain
  per model:  response, correct (true/false, yes/no, 1/0, or a score in [0, 1]: >= 0.5 is right), model_answer
              (the answer extracted from the response), tokens_in, tokens_out, cost_usd, latency_s. A model with no
              response needs its `correct` (a verdicts-only log: the replay expert answers with a marker text)
`read_log(path, columns, ...)` checks all of it and raises RoutingLogError (one line: the file, the row, the field);
`exclude` drops the questions whose id or prompt it lists (counted in `log.excluded`).
`write_outputs(...)` writes, into a temporary directory renamed into place (nothing partial is ever left):
  tasks.jsonl            Task rows (orchestra/data/tasks.py); task id = question id = the replay key
  replay/<expert>.jsonl  RouterArena's cached-results rows, the recorded-outputs format tools/experts/replay.py
                         reads: tokens and $ as recorded, correct iff score >= 0.5, a null answer where none was
  zoo.yaml, experiment.yaml  presets that work from anywhere (`experiment=<dir>/experiment.yaml`, paths absolute)
Prices, and the verdicts of logs that give only a gold answer, are the CLI's (cluster/routing_log.py): they need
tools/pricing and reward/judges, which the core does not import.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.jsonl import JSONLError, iter_jsonl, write_jsonl
from orchestra.types import Task

QUESTION_FIELDS = ("id", "prompt", "answer", "category")
CALL_FIELDS = ("response", "correct", "model_answer", "tokens_in", "tokens_out", "cost_usd", "latency_s")
FAMILY_COLUMNS = ("category", "family", "subject", "domain")  # found as the task family when none is named
_TRUE, _FALSE = {"true", "yes", "y", "right", "correct"}, {"false", "no", "n", "wrong", "incorrect"}


class RoutingLogError(ValueError):
    """Bad input: the message names the file, the row and the field."""


@dataclass
class Call:
    """One model's recorded answer to one question."""

    response: str | None  # None: the log records no text (a verdicts-only log; `score` is then given)
    score: float | None  # the recorded correctness in [0, 1]; None: judge `model_answer` or `response` vs gold
    model_answer: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    latency_s: float | None = None
    where: str = ""  # "row N": for messages about this call


@dataclass
class Question:
    id: str
    prompt: str
    answer: str | None
    category: str | None
    where: str
    calls: dict[str, Call] = field(default_factory=dict)  # model -> its answer


@dataclass
class RoutingLog:
    path: str
    questions: list[Question]
    models: list[str]
    dropped: int = 0  # questions left out because some model did not answer them (read_log's drop_incomplete)
    excluded: int = 0  # rows left out because `exclude` lists their question's id or prompt
    exclude_matched: int = 0  # the entries of `exclude` that matched some row
    layout: str = ""  # "long", "wide" or "by model" (module docstring)
    family_column: str | None = None  # the column read as the task family, if any

    def fail(self, where: str, msg: str) -> RoutingLogError:
        return RoutingLogError(f"routing log {self.path}: {where}: {msg}")


# ---------------------------------------------------------------- reading
def read_rows(path: Path, what: str = "routing log") -> list[tuple[str, dict[str, Any]]]:
    """(where, row) pairs; `where` is `row N` (1 = the first data row), with the line for text files."""
    if not path.is_file():
        raise RoutingLogError(f"{what} {path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".csv", ".tsv"):
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ",")
            out, n = [], 0
            for row in reader:
                n += 1
                if None in row:
                    raise RoutingLogError(f"{what} {path}: row {n} (line {reader.line_num}): more cells than "
                                          f"the header's {len(reader.fieldnames or [])} columns")
                out.append((f"row {n} (line {reader.line_num})", row))
            return out
    if suffix == ".jsonl":
        out = []
        try:
            for n, row in iter_jsonl(path):
                out.append((f"row {len(out) + 1} (line {n})", row))
        except JSONLError as e:
            raise RoutingLogError(f"{what} {path}: row {len(out) + 1} (line {e.lineno}): malformed JSON: "
                                  f"{e.msg} at column {e.colno}") from None
        return out
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise RoutingLogError(f"{what} {path}: malformed JSON: {e.msg} at line {e.lineno}") from None
        if not isinstance(data, list):
            raise RoutingLogError(f"{what} {path}: expected a JSON list of rows")
        return [(f"row {n}", r) for n, r in enumerate(data, 1)]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(f"row {n}", r) for n, r in enumerate(pq.read_table(path).to_pylist(), 1)]
    raise RoutingLogError(f"{what} {path}: unknown format {suffix!r} (use .csv, .tsv, .jsonl, .json, .parquet)")


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, float) and math.isnan(v))


def _score(v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return float(v.strip().lower() in _TRUE)
    x = float(v)  # ValueError for anything else
    if not 0.0 <= x <= 1.0:
        raise ValueError
    return x


def _count(v: Any) -> int:
    x = float(v)
    if isinstance(v, bool) or x < 0 or not x.is_integer():
        raise ValueError
    return int(x)


def _amount(v: Any) -> float:
    x = float(v)
    if isinstance(v, bool) or x < 0 or not math.isfinite(x):
        raise ValueError
    return x


_PARSE = {"correct": (_score, "true/false, yes/no, 1/0 or a score in [0, 1]"),
          "tokens_in": (_count, "a whole number >= 0"), "tokens_out": (_count, "a whole number >= 0"),
          "cost_usd": (_amount, "a number of dollars >= 0"), "latency_s": (_amount, "a number of seconds >= 0")}


def _call(get: Any, where: str) -> Call:
    values: dict[str, Any] = {}
    for name in CALL_FIELDS:
        raw, column = get(name)
        if _blank(raw):
            values[name] = None
        elif name in _PARSE:
            parse, expected = _PARSE[name]
            try:
                values[name] = parse(raw)
            except (TypeError, ValueError):
                raise RoutingLogError(f"field {column!r} = {str(raw)[:40]!r}: expected {expected}") from None
        else:
            values[name] = str(raw)
    if values["response"] is None and values["correct"] is None and values["model_answer"] is None:
        raise RoutingLogError(f"fields {get('response')[1]!r} and {get('correct')[1]!r} are missing or empty: "
                              "give the model's response or its verdict")
    score = values.pop("correct")
    return Call(score=score, where=where, **values)


def _is_verdict(v: Any) -> bool:
    return isinstance(v, bool) or (isinstance(v, str) and v.strip().lower() in ("true", "false"))


def _wide_columns(log: RoutingLog, rows: list[tuple[str, Any]], name: dict[str, str],
                  models: list[str] | None) -> dict[str, dict[str, str]]:
    """model -> {field: column} of a wide or by-model log (module docstring); sets `log.layout`."""
    cols = list(dict.fromkeys(k for _, r in rows if isinstance(r, dict) for k in r if isinstance(k, str)))
    suffix = {name.get(f, f): f for f in CALL_FIELDS}
    bar = list(dict.fromkeys(c.rsplit("|", 1)[0] for c in cols if "|" in c and c.rsplit("|", 1)[1] in suffix))
    resp = "_" + name.get("response", "response")
    by_model = [c[: -len(resp)] for c in cols if c.endswith(resp) and c[: -len(resp)] in cols]
    if models:
        missing = [m for m in models if m not in bar and m not in cols]
        if missing:
            raise log.fail("header", f"model {missing[0]!r} (--models) has no column {missing[0]!r} or "
                           f"'{missing[0]}|<field>' (columns: {', '.join(cols)[:300]})")
        bar, by_model = [m for m in models if m in bar], [m for m in models if m not in bar]
    elif bar:
        by_model = []
    elif not by_model:  # verdicts only: every column whose cells are all true/false (RouteLLM's MMLU files)
        own = {name.get(f, f) for f in QUESTION_FIELDS} | {log.family_column}
        by_model = [c for c in cols if c not in own and any(_is_verdict(r.get(c)) for _, r in rows)
                    and all(_blank(r.get(c)) or _is_verdict(r.get(c)) for _, r in rows)]
    if not bar and not by_model:
        raise log.fail("header", f"no {name.get('model', 'model')!r} column (long layout), no "
                       f"`<model>|{name.get('response', 'response')}` or `<model>{resp}` columns and no true/false "
                       "verdict columns (wide layouts): name the model columns with --models A,B")
    log.layout = "wide" if bar and not by_model else "by model" if by_model and not bar else "wide and by model"
    out = {m: {f: f"{m}|{name.get(f, f)}" for f in CALL_FIELDS} for m in bar}
    out.update({m: {f: m if f == "correct" else f"{m}_{name.get(f, f)}" for f in CALL_FIELDS} for m in by_model})
    return out


def read_log(path: str | Path, columns: dict[str, str] | None = None, drop_incomplete: bool = False,
             models: list[str] | None = None, exclude: set[str] | frozenset[str] = frozenset()) -> RoutingLog:
    """Read and check a routing log (module docstring); `columns` maps our field names to the file's, `models`
    names the model columns of a wide log. A question some model did not answer is an error, or with
    `drop_incomplete` left out (counted in `log.dropped`); one whose id or prompt is in `exclude` is left out."""
    path = Path(path)
    rows = read_rows(path)
    name = dict(columns or {})
    if not rows:
        raise RoutingLogError(f"routing log {path}: no rows")
    log = RoutingLog(str(path), [], [])
    first = rows[0][1]
    if not isinstance(first, dict):
        raise log.fail(rows[0][0], "expected an object with named fields")
    keys = {k for _, r in rows if isinstance(r, dict) for k in r}
    if "category" in name:
        if name["category"] not in keys:
            raise log.fail("header", f"no column {name['category']!r} (the task family) in the log")
        log.family_column = name["category"]
    else:
        log.family_column = next((c for c in FAMILY_COLUMNS if c in keys), None)
        name["category"] = log.family_column or "category"
    wide = None if name.get("model", "model") in first else _wide_columns(log, rows, name, models)
    log.layout = log.layout or "long"
    by_id: dict[str, Question] = {}
    matched: set[str] = set()
    for where, row in rows:
        try:
            if hit := _excluded(row, name, exclude):
                log.excluded += 1
                matched |= hit
                continue
            _add_row(log, by_id, row, where, name, wide)
        except RoutingLogError as e:
            raise log.fail(where, str(e)) from None
    log.exclude_matched = len(matched)
    log.questions = [q for q in by_id.values() if len(q.calls) == len(log.models)]
    log.dropped = len(by_id) - len(log.questions)
    if log.dropped and not drop_incomplete:
        q = next(q for q in by_id.values() if len(q.calls) < len(log.models))
        m = next(m for m in log.models if m not in q.calls)
        raise log.fail(q.where, f"question {q.id!r} has no answer from model {m!r} (every model must answer "
                       "every question; --drop-incomplete keeps only the questions all models answered)")
    if not log.questions:
        raise log.fail("all rows", "no question was answered by every model" + (
            f" ({log.excluded} rows excluded)" if log.excluded else ""))
    if len(log.models) < 2:
        raise log.fail("header", f"only {len(log.models)} model(s) ({', '.join(log.models)}): routing needs two")
    return log


def _question_key(row: dict[str, Any], col: dict[str, str]) -> tuple[str, str]:
    """(question id, prompt) of a row; the id is the prompt's hash where the row gives none."""
    prompt = row.get(col["prompt"])
    if _blank(prompt):
        raise RoutingLogError(f"field {col['prompt']!r} is missing or empty")
    prompt = str(prompt)
    qid = "" if _blank(row.get(col["id"])) else str(row[col["id"]]).strip()
    return qid or "q" + hashlib.sha1(prompt.encode()).hexdigest()[:12], prompt


def _excluded(row: Any, name: dict[str, str], exclude: set[str] | frozenset[str]) -> set[str]:
    """The entries of `exclude` naming this row's question (its id, or its prompt with or without outer spaces)."""
    if not exclude or not isinstance(row, dict):
        return set()
    qid, prompt = _question_key(row, {f: name.get(f, f) for f in ("id", "prompt")})
    return {qid, prompt, prompt.strip()} & exclude


def _add_row(log: RoutingLog, by_id: dict[str, Question], row: Any, where: str, name: dict[str, str],
             wide: dict[str, dict[str, str]] | None) -> None:
    if not isinstance(row, dict):
        raise RoutingLogError(f"expected an object with named fields, got {str(row)[:40]!r}")
    col = {f: name.get(f, f) for f in QUESTION_FIELDS + ("model",)}
    qid, prompt = _question_key(row, col)
    gold = None if _blank(row.get(col["answer"])) else str(row[col["answer"]]).strip()
    category = None if _blank(row.get(col["category"])) else str(row[col["category"]])
    q = by_id.get(qid)
    if q is None:
        q = by_id[qid] = Question(qid, prompt, gold, category, where)
    elif q.prompt != prompt or q.answer != gold:
        what = "prompt" if q.prompt != prompt else "answer"
        raise RoutingLogError(f"field {col[what]!r}: question id {qid!r} was given another {what} at "
                              f"{q.where} (ids must name one question)")
    if wide is not None:
        calls = {}
        for m, fields in wide.items():
            cells = {f: (row.get(c), c) for f, c in fields.items()}
            if all(_blank(v) for v, _ in cells.values()):
                continue  # this model did not answer this question (a blank wide cell)
            calls[m] = _call(lambda f, cells=cells: cells[f], where)
    else:
        model = row.get(col["model"])
        if _blank(model):
            raise RoutingLogError(f"field {col['model']!r} is missing or empty")
        calls = {str(model).strip(): _call(lambda f: (row.get(name.get(f, f)), name.get(f, f)), where)}
    for m, call in calls.items():
        if m in q.calls:
            raise RoutingLogError(f"field {col['model']!r}: model {m!r} answered question {qid!r} already at "
                                  f"{q.calls[m].where}")
        if call.score is None and q.answer is None:
            raise RoutingLogError(f"field {col['answer']!r} is empty and model {m!r} has no 'correct': "
                                  "give the gold answer or each model's correctness")
        q.calls[m] = call
        if m not in log.models:
            log.models.append(m)


# ---------------------------------------------------------------- writing
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
