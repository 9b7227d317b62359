"""Routing logs -> questions with each model's recorded answer: read and check a log's layouts and fields.

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
A log may come as several files or a folder of them (log_files.py: the file name is the family where no column
gives one); a model's repeated records of one question are merged or settled by a rule (log_repeats.py).
Writing the project's formats is log_outputs.py's.
Prices are the CLI's (cluster/routing_log.py), and so is the judge that gives the verdicts a log leaves blank
(passed in as `judge`): they need tools/pricing and reward/judges, which the core does not import.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.data.log_files import RoutingLogError, Row, read_rows, read_sources
from orchestra.data.log_repeats import DEFAULT_DUPLICATES, DUPLICATE_RULES, Repeats, settle

__all__ = ["Call", "Judge", "Question", "RoutingLog", "RoutingLogError", "read_log", "read_rows"]
# (RoutingLogError and read_rows are log_files.py's, re-exported: the reading API is imported from here)

# judge: [(the model's answer, the gold answer, the prompt)] -> a score in [0, 1] each (the CLI's, via reward/judges)
Judge = Callable[[list[tuple[str, str, str]]], list[float]]

QUESTION_FIELDS = ("id", "prompt", "answer", "category")
CALL_FIELDS = ("response", "correct", "model_answer", "tokens_in", "tokens_out", "cost_usd", "latency_s")
FAMILY_COLUMNS = ("category", "family", "subject", "domain")  # found as the task family when none is named
_TRUE, _FALSE = {"true", "yes", "y", "right", "correct"}, {"false", "no", "n", "wrong", "incorrect"}


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
    calls: dict[str, Call] = field(default_factory=dict)  # model -> its answer (the kept one, once settled)
    repeats: dict[str, list[Call]] = field(default_factory=dict)  # model -> its later records, until settled


@dataclass
class RoutingLog:
    path: str  # the file, or the files and folders as given, space-separated
    questions: list[Question]
    models: list[str]
    dropped: int = 0  # questions left out because some model did not answer them (read_log's drop_incomplete)
    excluded: int = 0  # rows left out because `exclude` lists their question's id or prompt
    exclude_matched: int = 0  # the entries of `exclude` that matched some row
    layout: str = ""  # "long", "wide" or "by model" (module docstring)
    family_column: str | None = None  # the column read as the task family, if any
    family_from_files: bool = False  # no family column and several files: each file's name is its rows' family
    files: int = 1  # files read
    skipped_files: list[str] = field(default_factory=list)  # non-log files in a given folder, not read
    judged: int = 0  # verdicts the judge gave (records without `correct`, repeats included)
    repeats: Repeats = field(default_factory=Repeats)

    def fail(self, where: str, msg: str) -> RoutingLogError:
        return RoutingLogError(f"routing log {self.path}: {where}: {msg}")


# ---------------------------------------------------------------- reading
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


def read_log(path: str | Path | Sequence[str | Path], columns: dict[str, str] | None = None,
             drop_incomplete: bool = False, models: list[str] | None = None,
             exclude: set[str] | frozenset[str] = frozenset(), duplicates: str = DEFAULT_DUPLICATES,
             judge: Judge | None = None) -> RoutingLog:
    """Read and check a routing log (module docstring); `path` is a file, a folder of them or a list of both
    (log_files.py); `columns` maps our field names to the file's, `models` names the model columns of a wide log. A
    question some model did not answer is an error, or with `drop_incomplete` left out (counted in `log.dropped`);
    one whose id or prompt is in `exclude` is left out. `judge` gives the verdicts the log leaves blank (without it
    they stay None for the caller); then a model's repeated records of one question are settled by `duplicates`
    (log_repeats.py; counted in `log.repeats`)."""
    if duplicates not in DUPLICATE_RULES:
        raise RoutingLogError(f"duplicates {duplicates!r}: expected one of {', '.join(DUPLICATE_RULES)}")
    src = read_sources([path] if isinstance(path, (str, Path)) else path)
    rows = [(r.where, r.data) for r in src.rows]
    name = dict(columns or {})
    if not rows:
        raise RoutingLogError(f"routing log {src.label}: no rows")
    log = RoutingLog(src.label, [], [], files=len(src.files), skipped_files=src.skipped)
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
        log.family_from_files = log.family_column is None and len(src.files) > 1
    wide = None if name.get("model", "model") in first else _wide_columns(log, rows, name, models)
    log.layout = log.layout or "long"
    by_id: dict[str, Question] = {}
    two_families: set[str] = set()  # ids of questions whose rows name different families
    matched: set[str] = set()
    for row in src.rows:
        try:
            if hit := _excluded(row.data, name, exclude):
                log.excluded += 1
                matched |= hit
                continue
            _add_row(log, by_id, two_families, row, name, wide)
        except RoutingLogError as e:
            raise log.fail(row.where, str(e)) from None
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
    _judge(log, judge)
    log.repeats = _settle(log, duplicates)
    log.repeats.families = sum(q.id in two_families for q in log.questions)
    return log


def _judge(log: RoutingLog, judge: Judge | None) -> None:
    """Fill in the verdicts the log left blank, repeated records included (they are compared by verdict)."""
    todo = [(q, c) for q in log.questions for m in q.calls for c in (q.calls[m], *q.repeats.get(m, ()))
            if c.score is None]
    if not todo:
        return
    if judge is None:
        repeated = next((c for q in log.questions for m, cs in q.repeats.items() for c in (q.calls[m], *cs)
                         if c.score is None), None)
        if repeated is not None:
            raise log.fail(repeated.where, "a repeated answer without 'correct' needs a judge to compare its "
                           "verdict with the other records' (read_log's `judge`)")
        return
    scores = judge([(c.model_answer or c.response or "", q.answer or "", q.prompt) for q, c in todo])
    for (_q, call), score in zip(todo, scores, strict=True):
        call.score = float(score)
    log.judged = len(todo)


def _settle(log: RoutingLog, rule: str) -> Repeats:
    """Keep one record per (question, model) by `rule` (log_repeats.py) and count what was merged or overruled."""
    out = Repeats(rule=rule)
    prompts: dict[str, int] = {}
    for q in log.questions:
        prompts[q.prompt] = prompts.get(q.prompt, 0) + 1
        if not q.repeats:
            continue
        out.questions += 1
        for m, later in q.repeats.items():
            records = [q.calls[m], *later]
            verdicts = [c.score >= 0.5 for c in records if c.score is not None]
            if len(verdicts) < len(records):
                raise log.fail(records[0].where, f"model {m!r} has no verdict on question {q.id!r} to compare")
            if len(set(verdicts)) == 1:
                out.merged += 1
                continue
            out.conflicts += 1
            if rule == "error":
                k = verdicts.index(not verdicts[0])
                word = {True: "right", False: "wrong"}
                raise log.fail(records[k].where, f"model {m!r} is recorded {word[verdicts[k]]} on question {q.id!r} "
                               f"here and {word[verdicts[0]]} at {records[0].where} (--duplicates error; `majority` "
                               "keeps the verdict most records give, `first` the first record)")
            keep, tie = settle(verdicts, rule)
            out.ties += tie
            out.overruled += sum(v != verdicts[keep] for v in verdicts)
            q.calls[m] = records[keep]
        q.repeats = {}
    out.shared_prompts = sum(n > 1 for n in prompts.values())  # by_id is keyed by id: a shared prompt has two ids
    return out


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


def _add_row(log: RoutingLog, by_id: dict[str, Question], two_families: set[str], src: Row, name: dict[str, str],
             wide: dict[str, dict[str, str]] | None) -> None:
    row, where = src.data, src.where
    if not isinstance(row, dict):
        raise RoutingLogError(f"expected an object with named fields, got {str(row)[:40]!r}")
    col = {f: name.get(f, f) for f in QUESTION_FIELDS + ("model",)}
    qid, prompt = _question_key(row, col)
    gold = None if _blank(row.get(col["answer"])) else str(row[col["answer"]]).strip()
    category = (src.stem if log.family_from_files else
                None if _blank(row.get(col["category"])) else str(row[col["category"]]))
    q = by_id.get(qid)
    if q is None:
        q = by_id[qid] = Question(qid, prompt, gold, category, where)
    elif q.prompt != prompt or q.answer != gold:
        what = "prompt" if q.prompt != prompt else "answer"
        raise RoutingLogError(f"field {col[what]!r}: question id {qid!r} was given another {what} at "
                              f"{q.where} (ids must name one question)")
    elif q.category != category:
        two_families.add(qid)  # the same item filed under two subjects: it keeps its first family, counted
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
        if call.score is None and q.answer is None:
            raise RoutingLogError(f"field {col['answer']!r} is empty and model {m!r} has no 'correct': "
                                  "give the gold answer or each model's correctness")
        if m in q.calls:
            q.repeats.setdefault(m, []).append(call)  # settled once every verdict is known (_settle)
            continue
        q.calls[m] = call
        if m not in log.models:
            log.models.append(m)
