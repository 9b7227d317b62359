"""JSON Lines: the one reader and writer of every .jsonl file Orchestra reads or writes (tasks, corpora, episode
records, metrics, evaluation results, routing logs, replay files, retrieval indexes and questions).

A JSONL file is UTF-8, one JSON value a line, each line ended by "\\n". Only "\\n" ends a line: `str.splitlines()`
(and text-mode universal newlines) also split at characters a JSON string may hold raw (U+0085, U+2028, U+2029;
splitlines also \\r, \\x0b, \\x0c, \\x1c-\\x1e), and so cut a real benchmark question holding U+0085 in two. The
reader therefore splits the bytes at b"\\n" (a byte UTF-8 uses for nothing else) and decodes line by line, so an
error names its line. A leading byte-order mark is dropped; blank lines are skipped; "\\r\\n" endings read as well.

The writer keeps non-ASCII text readable (`ensure_ascii=False`) but writes U+0085, U+2028, U+2029 and lone
surrogates as \\u escapes: the file then splits correctly under any line splitter, and always encodes as UTF-8
(json.dumps already escapes \\n, \\r and the other control characters). Appends start on a fresh line when the file
ends in a torn line (a crash mid-write), so the torn fragment costs only itself.
`read_json` reads a whole-file JSON value of an expected kind (a list of rows, an object): the one reader of the
.json files beside the .jsonl ones (routing logs, retrieval questions, τ² domain files); its JSONFileError names the
file and what was wrong (missing, malformed at line and column, or the wrong kind of value).
Left to callers: what a record holds, and their own error wording (JSONLError and JSONFileError carry path, line,
msg, column).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

_BOM = b"\xef\xbb\xbf"
_JSON_SPACE = b" \t\r\n"
_RAW_BREAKS = re.compile("[\x85\u2028\u2029\ud800-\udfff]")  # the only line breaks json.dumps leaves raw


class JSONLError(ValueError):
    """A line that is not UTF-8 JSON: `path:line: not JSON (msg: column n)`."""

    def __init__(self, path: str | Path, lineno: int, msg: str, colno: int):
        self.path, self.lineno, self.msg, self.colno = path, lineno, msg, colno
        super().__init__(f"{path}:{lineno}: not JSON ({msg}: column {colno})")


class JSONFileError(ValueError):
    """A JSON file that is missing, malformed (`lineno`, `colno` set) or holds another kind of value than expected:
    `path: line n: malformed JSON (msg: column c)`, `path: no such file`, `path: expected a JSON list, got a JSON
    dict`. `msg` is the reason without the path."""

    def __init__(self, path: str | Path, msg: str, lineno: int | None = None, colno: int | None = None):
        self.path, self.msg, self.lineno, self.colno = path, msg, lineno, colno
        where = f"line {lineno}: " if lineno is not None else ""
        super().__init__(f"{path}: {where}{msg}")


# ---------------------------------------------------------------- reading
def _parse(lines: Iterable[bytes], name: str | Path, skip_bad: bool) -> Iterator[tuple[int, Any]]:
    for n, raw in enumerate(lines, 1):
        if n == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM):]
        raw = raw.removesuffix(b"\n").removesuffix(b"\r")  # so that error columns count on this line
        if not raw.strip(_JSON_SPACE):
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if skip_bad:
                continue
            raise JSONLError(name, n, f"invalid UTF-8, {e.reason}",
                             len(raw[:e.start].decode("utf-8", "replace")) + 1) from None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            if skip_bad:
                continue
            raise JSONLError(name, n, e.msg, e.colno) from None
        yield n, value


def iter_jsonl(path: str | Path, *, skip_bad: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every non-blank line of a .jsonl (or .jsonl.gz) file. A bad line raises
    JSONLError, or is skipped with `skip_bad` (files appended to while running may end in a torn line)."""
    path = Path(path)
    with (gzip.open if path.name.lower().endswith(".gz") else open)(path, "rb") as f:
        yield from _parse(f, path, skip_bad)


def read_jsonl(path: str | Path, *, skip_bad: bool = False) -> Iterator[Any]:
    """The values of a JSONL file, one per non-blank line (see iter_jsonl)."""
    return (value for _, value in iter_jsonl(path, skip_bad=skip_bad))


def load_jsonl(path: str | Path, *, skip_bad: bool = False) -> list[Any]:
    return list(read_jsonl(path, skip_bad=skip_bad))


def loads_jsonl(data: bytes | str, name: str = "<jsonl>", *, skip_bad: bool = False) -> list[Any]:
    """The values of JSONL text already in memory (e.g. a member of a zip); `name` is what errors call it."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return [value for _, value in _parse(io.BytesIO(raw), name, skip_bad)]


_KIND_NAMES = {list: "list", dict: "object", str: "string", int: "number", float: "number", bool: "boolean"}


def read_json(path: str | Path, kind: type = list, what: str = "") -> Any:
    """The JSON value of a whole file, which must be a `kind` (list: a JSON list; dict: an object); `what` says what
    the caller expected in the error ("a JSON list of rows"; default: a JSON <kind>). UTF-8, a leading byte-order mark
    dropped. Raises JSONFileError naming the file: missing, malformed (line and column), or of another kind."""
    path = Path(path)
    if not path.is_file():
        raise JSONFileError(path, "no such file")
    raw = path.read_bytes()
    try:
        text = raw.removeprefix(_BOM).decode("utf-8")
    except UnicodeDecodeError as e:
        raise JSONFileError(path, f"not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise JSONFileError(path, f"malformed JSON ({e.msg}: column {e.colno})", e.lineno, e.colno) from None
    if not isinstance(data, kind):
        got = "null" if data is None else _KIND_NAMES.get(type(data), type(data).__name__)
        raise JSONFileError(path, f"expected {what or 'a JSON ' + _KIND_NAMES.get(kind, kind.__name__)}, "
                                  f"got a JSON {got}")
    return data


# ---------------------------------------------------------------- writing
def dumps_line(record: Any, *, default: Callable[[Any], Any] | None = None, compact: bool = False) -> str:
    """One JSONL line, "\\n" included. `default` as in json.dumps; `compact` drops the spaces after , and :."""
    text = json.dumps(record, ensure_ascii=False, default=default,
                      separators=(",", ":") if compact else None)
    if not text.isascii():  # these only occur inside strings, where a \\u escape is the same JSON
        text = _RAW_BREAKS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text + "\n"


def _open_append(path: Path) -> IO[bytes]:
    f = open(path, "a+b")
    if f.tell() > 0:  # "a" opens at the end
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")  # a torn last line stays alone (and is skipped by skip_bad readers)
    return f


def write_jsonl(path: str | Path, records: Iterable[Any], *, append: bool = False, atomic: bool = False,
                default: Callable[[Any], Any] | None = None, compact: bool = False) -> Path:
    """Write (or append) records, one a line. `atomic` writes a temporary file beside `path` and renames it, so a
    reader never sees half a file (not with `append`)."""
    path = Path(path)
    if append and atomic:
        raise ValueError("write_jsonl: an append cannot be atomic")

    def lines(f: IO[bytes]) -> None:  # streamed: a corpus may not fit in memory twice
        for r in records:
            f.write(dumps_line(r, default=default, compact=compact).encode("utf-8"))

    if not atomic:
        with _open_append(path) if append else open(path, "wb") as f:
            lines(f)
        return path
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            lines(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


class JsonlWriter:
    """Writes records one at a time, each flushed as a whole line (metrics, evaluation results as they finish)."""

    def __init__(self, path: str | Path, *, append: bool = False, default: Callable[[Any], Any] | None = None):
        self.path, self.default = Path(path), default
        self._f: IO[bytes] = _open_append(self.path) if append else open(self.path, "wb")

    def write(self, record: Any) -> None:
        self._f.write(dumps_line(record, default=self.default).encode("utf-8"))
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
