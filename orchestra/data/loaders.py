"""Benchmark loaders: public QA sets -> Task rows (+ a retriever corpus where the set has passages).

`load(name, path, mapping=None, limit=None, pref=None) -> TaskSet`. Names: frames, gsm8k, math500, hotpotqa,
nq_open, mmlu_pro, hle. `path` is a local file (or directory, for mmlu_pro), or `hf:<dataset>[:<split>]` to
read through the `datasets` library in real use (imported lazily; never used in tests; it downloads, so it
is refused while HF_HUB_OFFLINE=1 unless the dataset is already cached). HLE is only ever read from a file
the user supplies: it is gated and must not be redistributed, so there is no hub fallback.
Formats are those of ../shared/data (SOURCES.md). data_source names pick judges in RewardConfig.judges
(e.g. math500 -> math, mmlu_pro -> choice); gold aliases go to meta["answer_aliases"].
Train/held-out splitting is orchestra.data.tasks' job; the tool catalogue defaults to the orchestrator's tools.
"""

from __future__ import annotations

import ast
import gzip
import json
import os
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from orchestra.data.synth.template import ORCHESTRATOR_TOOLS, TaskSet
from orchestra.jsonl import load_jsonl, loads_jsonl
from orchestra.types import Task

Rows = Iterable[dict[str, Any]]


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """JSONL (optionally .gz), a JSON list, parquet, or a zip holding one JSON list or JSONL file."""
    if not path.exists():
        raise FileNotFoundError(f"dataset file {path} does not exist")
    name = path.name.lower()
    if name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            inner = [n for n in z.namelist() if n.endswith((".json", ".jsonl"))]
            if len(inner) != 1:
                raise ValueError(f"{path}: expected one JSON file in the zip, found {inner}")
            if inner[0].endswith(".jsonl"):
                return loads_jsonl(z.read(inner[0]), f"{path}:{inner[0]}")
            return json.loads(z.read(inner[0]))
    if name.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return load_jsonl(path)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of rows")
    return data


def _hf_rows(spec: str) -> list[dict[str, Any]]:
    """`hf:<dataset>[:<config>][:<split>]` through `datasets` (real use only)."""
    parts = spec[3:].split(":")
    name, split = parts[0], parts[-1] if len(parts) > 1 else "test"
    config = parts[1] if len(parts) > 2 else None
    try:
        import datasets  # lazy: heavy, and only for real use
    except ImportError:
        raise ImportError("reading a Hugging Face dataset needs `pip install datasets`; or pass a local file") from None
    # With HF_HUB_OFFLINE=1 `datasets` serves only what is cached and fails clearly otherwise.
    return list(datasets.load_dataset(name, config, split=split))


def _rows(path: str | Path) -> list[dict[str, Any]]:
    spec = str(path)
    return _hf_rows(spec) if spec.startswith("hf:") else _read_rows(Path(spec).expanduser())


def _task(i: Any, source: str, problem: str, answer: Any, mapping: dict[str, str] | None,
          pref: dict[str, float] | None, aliases: list[str] | None = None, **meta: Any) -> Task:
    meta = {k: v for k, v in meta.items() if v is not None}
    if aliases:
        meta["answer_aliases"] = [str(a) for a in aliases]
    return Task(id=f"{source}-{i}", problem=str(problem).strip(), answer=str(answer).strip(), category="qa",
                data_source=source, tools=list(ORCHESTRATOR_TOOLS), model_mapping=dict(mapping or {}),
                pref=dict(pref or {}), meta=meta)


# ---------------------------------------------------------------- one function per benchmark
def frames(rows: Rows, mapping=None, pref=None) -> TaskSet:
    out = []
    for n, r in enumerate(rows):
        links = r.get("wiki_links")
        if isinstance(links, str):
            try:
                links = ast.literal_eval(links)
            except (ValueError, SyntaxError):
                links = [links]
        out.append(_task(r.get("id", n), "frames", r.get("problem") or r.get("Prompt"), r.get("answer") or r.get("Answer"),
                         mapping, pref, family="lookup", reasoning_type=r.get("reasoning_type"), wiki_links=links))
    return TaskSet(out)


def gsm8k(rows: Rows, mapping=None, pref=None) -> TaskSet:
    out = []
    for n, r in enumerate(rows):
        answer = str(r["answer"]).rsplit("####", 1)[-1].strip().replace(",", "")
        out.append(_task(n, "gsm8k", r["question"], answer, mapping, pref, family="arith"))
    return TaskSet(out)


def math500(rows: Rows, mapping=None, pref=None) -> TaskSet:
    return TaskSet([_task(str(r.get("unique_id", n)).replace("/", "_").removesuffix(".json"), "math500",
                          r["problem"], r["answer"], mapping, pref, family="arith", subject=r.get("subject"),
                          difficulty=r.get("level")) for n, r in enumerate(rows)])


def nq_open(rows: Rows, mapping=None, pref=None) -> TaskSet:
    out = []
    for n, r in enumerate(rows):
        answers = r["answer"] if isinstance(r["answer"], list) else [r["answer"]]
        out.append(_task(n, "nq_open", r["question"], answers[0], mapping, pref, aliases=answers[1:],
                         family="lookup"))
    return TaskSet(out)


def _literal(value: Any) -> Any:
    return ast.literal_eval(value) if isinstance(value, str) and value[:1] in "[{" else value


def hotpotqa(rows: Rows, mapping=None, pref=None, corpus: dict[str, list[str]] | None = None) -> TaskSet:
    """Questions + passages: the given corpus {title: [sentences]} or else every question's own context."""
    rows = list(rows)
    paragraphs: dict[str, str] = {t: "".join(s) for t, s in (corpus or {}).items()}
    out = []
    for r in rows:
        for title, sents in _literal(r.get("context", [])):
            paragraphs.setdefault(title, "".join(sents))
        gold_titles = sorted({t for t, _ in _literal(r.get("supporting_facts", []))})
        out.append(_task(r["_id"], "hotpotqa", r["question"], r["answer"], mapping, pref, family="lookup",
                         doc_ids=[f"hp:{t}" for t in gold_titles], kind=r.get("type"), level=r.get("level")))
    passages = [{"id": f"hp:{t}", "title": t, "text": p} for t, p in paragraphs.items()]
    return TaskSet(out, passages)


LETTERS = "ABCDEFGHIJ"


def mmlu_pro(rows: Rows, mapping=None, pref=None) -> TaskSet:
    """MMLU-Pro rows (as in the routing zips or TIGER-Lab/MMLU-Pro): options lettered A..J, gold = letter."""
    out, seen = [], set()
    for r in rows:
        qid = str(r["question_id"])
        if qid in seen:
            continue
        seen.add(qid)
        options = _literal(r.get("options") or [])
        body = "\n".join(f"({LETTERS[i]}) {o}" for i, o in enumerate(options[:len(LETTERS)]))
        answer = r.get("answer") or LETTERS[int(r["answer_index"])]
        out.append(_task(qid, "mmlu_pro", f"{r['question'].strip()}\n{body}", answer, mapping, pref,
                         question_id=qid, category_name=r.get("category"), family=r.get("category")))
    return TaskSet(out)


def hle(rows: Rows, mapping=None, pref=None) -> TaskSet:
    """Humanity's Last Exam rows {id, question, answer, answer_type, image?}; image questions are skipped
    (the orchestrator is text-only) and counted in each task's meta["skipped_image_rows"]."""
    rows = list(rows)
    text_rows = [r for r in rows if not r.get("image")]
    skipped = len(rows) - len(text_rows)
    return TaskSet([_task(r.get("id", n), "hle", r["question"], r["answer"], mapping, pref,
                          answer_type=r.get("answer_type"), family=r.get("category"), skipped_image_rows=skipped)
                    for n, r in enumerate(text_rows)])


LOADERS: dict[str, Callable[..., TaskSet]] = {"frames": frames, "gsm8k": gsm8k, "math500": math500,
                                              "hotpotqa": hotpotqa, "nq_open": nq_open, "mmlu_pro": mmlu_pro,
                                              "hle": hle}


def resolve(path: str | Path) -> Path:
    """Relative paths: against the cwd, then $ORCHESTRA_SHARED_DATA (default ../shared/data beside the repo)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    shared = Path(os.environ.get("ORCHESTRA_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data"))
    return shared / p if (shared / p).exists() else p


def _mmlu_pro_dir(path: Path) -> list[dict[str, Any]]:
    """A directory of routing files: questions from the first, kept only if every file has them, so each
    replayed model has a recorded answer for every task (12,002 of ~12,030 in the shared copies)."""
    files = sorted(path.glob("*.zip")) + sorted(path.glob("*.json"))
    if not files:
        raise FileNotFoundError(f"{path}: no MMLU-Pro .zip/.json files")
    rows = _read_rows(files[0])
    common = {str(r["question_id"]) for r in rows}
    for f in files[1:]:
        common &= {str(r["question_id"]) for r in _read_rows(f)}
    return [r for r in rows if str(r["question_id"]) in common]


def load(name: str, path: str | Path, mapping: dict[str, str] | None = None, limit: int | None = None,
         pref: dict[str, float] | None = None) -> TaskSet:
    """Load benchmark `name` from `path` (file, directory for mmlu_pro/hotpotqa, or hf:<dataset>)."""
    if name not in LOADERS:
        raise ValueError(f"unknown dataset loader {name!r}; choose one of {sorted(LOADERS)}")
    spec = str(path)
    if not spec:
        raise ValueError(f"loader {name!r} needs a path" + (" (HLE is only read from a local file you supply)"
                                                               if name == "hle" else ""))
    if name == "hle" and spec.startswith("hf:"):
        raise ValueError("HLE is gated and must not be redistributed: download it yourself and pass the file")
    local = resolve(spec)
    if not spec.startswith("hf:"):
        spec = str(local)
    corpus = None
    if name == "hotpotqa" and not spec.startswith("hf:"):
        if local.is_dir():
            local = next(iter(sorted(p for p in local.glob("*.json") if "corpus" not in p.name)), local)
            spec = str(local)
        side = local.with_name(local.stem + "_corpus.json")
        corpus = json.loads(side.read_text()) if side.is_file() else None
    rows = _mmlu_pro_dir(local) if name == "mmlu_pro" and local.is_dir() else _rows(spec)
    if limit is not None:
        rows = rows[:limit]
    if name == "hotpotqa":
        return hotpotqa(rows, mapping, pref, corpus=corpus)
    return LOADERS[name](rows, mapping, pref)
