"""Where a routing log's rows come from: one file, several files, or a folder of them (read by routing_log.py).

A log may arrive as one file or split by subject, as RouteLLM ships MMLU (`mmlu_anatomy.csv`, `mmlu_astronomy.csv`,
...). `read_sources(paths)` reads every file of the given paths (a folder: its .csv/.tsv/.jsonl/.json/.parquet files,
sorted by name, not its sub-folders; other files are listed as skipped, never read) and returns their rows in that
order, each labelled with where it is (`row N (line M)`, prefixed by the file's path when there are several) and the
file's stem (its name without the suffix), which routing_log.py makes the task family when the log has no family
column. Checking the rows, the layouts and repeated questions are routing_log.py's and log_repeats.py's.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestra.jsonl import JSONFileError, JSONLError, iter_jsonl, read_json

LOG_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")


class RoutingLogError(ValueError):
    """Bad input: the message names the file, the row and the field."""


@dataclass
class Row:
    where: str  # "row N (line M)", with the file's path in front when the log has several files
    data: Any  # the row as read: a dict of column -> cell (anything else is refused by routing_log.py)
    stem: str  # the file's name without its suffix: the task family when the log has no family column


@dataclass
class Sources:
    label: str  # the paths as given, space-separated: error messages and the presets' "written by" line
    files: list[Path]
    rows: list[Row]
    skipped: list[str] = field(default_factory=list)  # files in a given folder that are not logs (README.md, ...)


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
            data = read_json(path, list, "a JSON list of rows")
        except JSONFileError as e:
            raise RoutingLogError(f"{what} {e}") from None
        return [(f"row {n}", r) for n, r in enumerate(data, 1)]
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return [(f"row {n}", r) for n, r in enumerate(pq.read_table(path).to_pylist(), 1)]
    raise RoutingLogError(f"{what} {path}: unknown format {suffix!r} (use {', '.join(LOG_SUFFIXES)})")


def log_files(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """The files the given paths name (a folder: its log files by name) and the folder entries skipped."""
    if not paths:
        raise RoutingLogError("routing log: no file or folder given")
    files: list[Path] = []
    skipped: list[str] = []
    for given in map(Path, paths):
        if given.is_dir():
            inside = sorted(p for p in given.iterdir() if p.is_file() and not p.name.startswith("."))
            found = [p for p in inside if p.suffix.lower() in LOG_SUFFIXES]
            if not found:
                raise RoutingLogError(f"routing log folder {given}: no {', '.join(LOG_SUFFIXES)} files in it")
            files += found
            skipped += [str(p) for p in inside if p not in found]
        elif given.is_file():
            files.append(given)
        else:
            raise RoutingLogError(f"routing log {given}: no such file or folder")
    seen: dict[Path, Path] = {}
    for f in files:
        # one file read twice would make every row a repeat of itself: merged, and the log counted twice
        if (key := f.resolve()) in seen:
            raise RoutingLogError(f"routing log {f}: given twice (also as {seen[key]})")
        seen[key] = f
    return files, skipped


def read_sources(paths: Sequence[str | Path]) -> Sources:
    """Every row of every file the paths name, in order (module docstring)."""
    files, skipped = log_files(paths)
    rows: list[Row] = []
    for f in files:
        prefix = f"{f} " if len(files) > 1 else ""
        rows += [Row(prefix + where, data, f.stem) for where, data in read_rows(f)]
    return Sources(" ".join(str(p) for p in paths), files, rows, skipped)
