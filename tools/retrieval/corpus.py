"""Passages and index directories: what every retrieval index shares.

A passage is `{id, title, text}`; a search returns `Hit`s; `SearchIndex` is what the `retrieve` tool needs of an
index (DenseIndex, BM25Index, HybridIndex). An index directory holds the index files, `meta.jsonl` (one passage per
line, in id order) and `info.json` (written last, so a half-written directory is never loaded); each file is
written atomically. `load_passages` reads passages from JSONL, parquet, a JSON list or a HotpotQA-style
{title: [sentences]} dict.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestra.jsonl import JSONLError, iter_jsonl, load_jsonl, write_jsonl

Passage = dict[str, str]  # {id, title, text}


@dataclass
class Hit:
    doc_id: str
    title: str
    text: str
    score: float

    def render(self) -> str:
        return f"{self.title}: {self.text}" if self.title else self.text


class SearchIndex(Protocol):
    """What the tool needs of an index (DenseIndex, BM25Index, HybridIndex)."""

    def search(self, queries: list[str], k: int = 10, allow_ids: Iterable[str] | None = None) -> list[list[Hit]]: ...

    def build(self, passages: list[Passage], progress: Callable[[int], None] | None = None) -> Any: ...

    def save(self, out_dir: str | Path) -> Path: ...


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_index_meta(out: Path, passages: list[Passage], info: dict[str, Any]) -> None:
    write_jsonl(out / "meta.jsonl", ({"id": p["id"], "title": p["title"], "text": p["text"]} for p in passages),
                atomic=True)
    atomic_write(out / "info.json", lambda tmp: Path(tmp).write_text(json.dumps(info, indent=1)))


def read_index_meta(index_dir: Path, kind: str) -> tuple[list[Passage], dict[str, Any]]:
    info_path = index_dir / "info.json"
    if not info_path.is_file():
        raise FileNotFoundError(f"{index_dir} is not a finished index directory (no info.json)")
    info = json.loads(info_path.read_text())
    if info.get("kind") != kind:
        raise ValueError(f"{index_dir} holds a {info.get('kind')!r} index, not {kind!r}")
    passages = load_jsonl(index_dir / "meta.jsonl")
    if len(passages) != info["count"]:
        raise ValueError(f"{index_dir}: meta.jsonl has {len(passages)} passages, info.json says {info['count']}")
    return passages, info


class PassageStore:
    """Shared bookkeeping: passages in index order and doc id -> position."""

    def _set_passages(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.position = {p["id"]: i for i, p in enumerate(passages)}
        if len(self.position) != len(passages):
            dup = next(p["id"] for n, p in enumerate(passages) if self.position[p["id"]] != n)
            raise ValueError(f"duplicate passage id {dup!r} in the corpus")

    def _allowed_positions(self, allow_ids: Iterable[str] | None):
        if allow_ids is None:
            return None
        import numpy as np

        return np.array(sorted({self.position[d] for d in allow_ids if d in self.position}), dtype=np.int64)

    def _hit(self, pos: int, score: float) -> Hit:
        p = self.passages[pos]
        return Hit(p["id"], p.get("title", ""), p["text"], float(score))

    def __len__(self) -> int:
        return len(self.passages)


def doc_text(p: Passage) -> str:
    return f"{p['title']}. {p['text']}" if p.get("title") else p["text"]


def _jsonl_rows(path: Path) -> list[tuple[str, Any]]:
    try:
        return [(f"line {n}", row) for n, row in iter_jsonl(path)]
    except JSONLError as e:
        raise ValueError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None


def load_passages(source: str | Path | list[dict[str, Any]]) -> list[Passage]:
    """Passages {id, title, text} from JSONL, parquet, a JSON list, a JSON {title: [sentences]} dict (the
    HotpotQA corpus shape; id = title), or a list of dicts. Raises ValueError naming the file, row and field."""
    if isinstance(source, list):
        rows: list[tuple[str, Any]] = [(f"corpus row {n}", row) for n, row in enumerate(source)]
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"corpus not found: {path}")
        if path.suffix == ".parquet":
            import pandas as pd

            rows = [(f"{path} row {n}", r) for n, r in enumerate(pd.read_parquet(path).to_dict("records"))]
        elif path.suffix == ".jsonl":
            rows = [(f"{path} {where}", r) for where, r in _jsonl_rows(path)]
        else:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {e.lineno}: not valid JSON ({e.msg})") from None
            if isinstance(data, dict):
                data = [{"id": t, "title": t, "text": "".join(s) if isinstance(s, list) else str(s)}
                        for t, s in data.items()]
            if not isinstance(data, list):
                raise ValueError(f"{path}: expected a JSON list of passages or a {{title: [sentences]}} object")
            rows = [(f"{path} row {n}", r) for n, r in enumerate(data)]
    passages, seen = [], set()
    for n, (where, row) in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected an object with a string 'text', got {str(row)[:80]!r}")
        if not isinstance(row.get("text"), str):
            raise ValueError(f"{where} field 'text': expected a string, got {str(row.get('text'))[:80]!r}")
        doc_id = str(row.get("id", n))
        if doc_id in seen:
            raise ValueError(f"{where} field 'id': duplicate passage id {doc_id[:80]!r}")
        seen.add(doc_id)
        passages.append({"id": doc_id, "title": str(row.get("title") or ""), "text": row["text"].strip()})
    return passages
