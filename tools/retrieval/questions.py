"""Questions with gold passages, for measuring (and fitting) retrieval on a user's own corpus; and recall@k.

A questions file is JSONL (one object a line) or a JSON list of objects, each with `question` (a string) and its
gold in one of three fields:
* `supporting_ids` — passage ids of the index (the finest gold: a sentence corpus needs it);
* `supporting_titles` — passage titles: a title counts as found when any hit carries it;
* `supporting_facts` — HotpotQA's `[[title, sentence_no], ...]`, read as the titles (HotpotQA files load as is);
* `paragraphs` — MuSiQue's `[{title, paragraph_text, is_supporting, ...}, ...]`: the titles of the paragraphs
  flagged `is_supporting` (MuSiQue files load as is; at least one must be flagged).
Every gold id or title must be in the index: a gold that cannot be retrieved is a mismatch between the files, not
a miss, so it is refused. Errors are one line naming the file, the row (JSONL: line) and the field, raised before
anything is written. Fitting and the CLI are tools/retrieval/fit.py and __main__.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.jsonl import JSONLError, iter_jsonl, read_json
from tools.retrieval.corpus import Hit, Passage

GOLD_FIELDS = ("supporting_ids", "supporting_titles", "supporting_facts", "paragraphs")


@dataclass(frozen=True)
class Question:
    text: str
    gold: frozenset[str]
    by: str  # "id" or "title": what a hit is matched on

    def recall(self, hits: Sequence[Hit], k: int) -> float:
        """The share of this question's gold found among the first k hits."""
        found = {h.doc_id if self.by == "id" else h.title for h in hits[:k]}
        return len(self.gold & found) / len(self.gold)


def mean_recall(questions: Sequence[Question], rows: Sequence[Sequence[Hit]], k: int) -> float:
    return sum(q.recall(row, k) for q, row in zip(questions, rows, strict=True)) / max(len(questions), 1)


def _rows(path: Path) -> list[tuple[str, Any]]:
    """(where, row) pairs; `where` names the row as a reader of the file would find it."""
    if path.suffix == ".jsonl":
        try:
            return [(f"line {n}", row) for n, row in iter_jsonl(path)]
        except JSONLError as e:
            raise ValueError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None
    data = read_json(path, list, "a JSON list of question objects (or JSONL)")
    return [(f"row {n}", row) for n, row in enumerate(data)]


def _gold(row: dict[str, Any], where: str) -> tuple[str, list[Any], str]:
    """(field, values, by) of a row's gold, or ValueError naming the field."""
    present = [f for f in GOLD_FIELDS if f in row]
    if len(present) != 1:
        raise ValueError(f"{where}: needs exactly one gold field of {', '.join(GOLD_FIELDS)}, "
                         f"got {present or 'none'}")
    field = present[0]
    values = row[field]
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where} field {field!r}: expected a non-empty list, got {str(values)[:60]!r}")
    if field == "paragraphs":
        if not all(isinstance(v, dict) and isinstance(v.get("title"), str) for v in values):
            raise ValueError(f"{where} field 'paragraphs': expected [{{title, is_supporting, ...}}, ...]")
        gold = [v["title"] for v in values if v.get("is_supporting") is True]
        if not gold:
            raise ValueError(f"{where} field 'paragraphs': no paragraph has is_supporting: true")
        return field, gold, "title"
    if field == "supporting_facts":
        if not all(isinstance(v, list) and v and isinstance(v[0], str) for v in values):
            raise ValueError(f"{where} field 'supporting_facts': expected [[title, sentence_no], ...]")
        return field, [v[0] for v in values], "title"
    return field, values, "id" if field == "supporting_ids" else "title"


def load_questions(path: str | Path, passages: Sequence[Passage]) -> list[Question]:
    """The questions of `path` with their gold checked against `passages` (the index's); ValueError naming the
    file, row and field of the first bad one."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"questions file not found: {path}")
    ids = {p["id"] for p in passages}
    titles = {p.get("title", "") for p in passages} - {""}
    questions = []
    for where, row in _rows(path):
        where = f"{path} {where}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object, got {str(row)[:60]!r}")
        text = row.get("question")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where} field 'question': expected a non-empty string, got {str(text)[:60]!r}")
        field, values, by = _gold(row, where)
        known = ids if by == "id" else titles
        for v in values:
            if not isinstance(v, str | int) or isinstance(v, bool):
                raise ValueError(f"{where} field {field!r}: expected strings, got {v!r}")
            if str(v) not in known:
                what = "passage id" if by == "id" else "passage title"
                raise ValueError(f"{where} field {field!r}: {str(v)[:80]!r} is no {what} of the index")
        questions.append(Question(text.strip(), frozenset(str(v) for v in values), by))
    if not questions:
        raise ValueError(f"{path}: no questions")
    return questions
