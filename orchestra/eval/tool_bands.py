"""Tool-mix bands: which tool each tool id belongs to, in reading order, with malformed ids pooled as "invalid".

A turn is counted under its first call's tool id (orchestra.types.ToolCall.tool_id: the `model` argument when
given, else the tool's name), so a policy that writes `answer-7`, `-1` or `146-2` creates ids of its own. For
plots these are sorted into bands:

- **Valid ids.** With a catalogue (`catalogue_ids`: each task's tier ids of its tiered tools plus the names of
  its tools without tiers), an id is valid iff it is in the catalogue. Without one, iff it has the catalogue's
  shape: a tier id is a tiered tool's prefix, at most one other word, and a number >= 1 (`answer-2`,
  `answer-math-2`; not `answer-`, `search--1`, `answer-adanswer-1`); a tool name is an identifier that does not
  start with a tiered tool's word (`calculator`; not `answer`, a call without its required `model`, nor the
  run-together `answer1`, `answerreasoner-2`). The shape rule cannot tell an invented `answer-9` from a real
  tier: pass the catalogue where it is known.
- **Tool of an id.** The tiered tool whose prefix it carries (`search-` -> search, `reasoner-` ->
  enhance_reasoning, `answer-` -> answer), else the id itself (a tool without tiers is its own family).
- **Order.** Tools in catalogue order (search, enhance_reasoning, answer, then the rest by name), tiers by their
  number within a tool; every invalid id goes into one last band, INVALID, whatever it was.

Pure functions with no matplotlib: orchestra/eval/plots.py turns a band's (family, shade) into a colour.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestra.schema import TIER_PREFIXES

INVALID = "invalid"
# the tiered tools and their tier-id prefixes, in the order bands are drawn
TIERED: dict[str, tuple[str, ...]] = dict(TIER_PREFIXES)
# the words of the tiered tools (their names and prefixes): a second one inside an id means a run-together mistake
_WORDS = tuple(sorted({w for name, prefixes in TIERED.items() for w in (name, *(p.strip("-") for p in prefixes))}))
_TIER_SHAPE = re.compile(rf"(?:{'|'.join(re.escape(p) for ps in TIERED.values() for p in ps)})"
                         r"(?:(?P<word>[a-z]+)-)?[1-9][0-9]*")
_NAME_SHAPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Band:
    """One plotted band: its label, the tool ids it sums, its tool family and its place inside the family."""

    label: str
    tool: str  # the family: a tool name, or INVALID
    ids: tuple[str, ...] = field(default=())
    shade: int = 0  # index of this band within its family
    shades: int = 1  # bands in the family


def tool_of(tool_id: str) -> str:
    """The tool a (valid) tool id belongs to: the tiered tool whose prefix it starts with, else the id itself."""
    for name, prefixes in TIERED.items():
        if tool_id.startswith(prefixes):
            return name
    return tool_id


def looks_valid(tool_id: str) -> bool:
    """The shape rule used when no catalogue is given (see the module docstring)."""
    tier = _TIER_SHAPE.fullmatch(tool_id)
    if tier:
        return not any(w in (tier["word"] or "") for w in _WORDS)
    return bool(_NAME_SHAPE.fullmatch(tool_id)) and not tool_id.lower().startswith(_WORDS)


def catalogue_ids(tasks: Iterable[Any], default_tiers: Mapping[str, str] | None = None) -> set[str]:
    """The tool ids a policy can validly produce on these tasks: the tier ids of each task's tiered tools (its
    model_mapping, else `default_tiers`, as the tools resolve them) and the names of its tools without tiers."""
    out: set[str] = set()
    for task in tasks:
        mapping = task.model_mapping or default_tiers or {}
        prefixes = tuple(p for name in task.tools if name in TIERED for p in TIERED[name])
        out.update(t for t in mapping if prefixes and t.startswith(prefixes))
        out.update(name for name in task.tools if name not in TIERED)
    return out


def _tier_key(tool_id: str) -> tuple[str, int, str]:
    head, _, num = tool_id.rpartition("-")
    return (head, int(num), tool_id) if num.isdigit() else (tool_id, 0, tool_id)


def _family_key(tool: str) -> tuple[int, str]:
    order = list(TIERED)
    return (order.index(tool), "") if tool in order else (len(order), tool)


def tool_bands(ids: Iterable[str], catalogue: Collection[str] | None = None) -> list[Band]:
    """Bands for these tool ids: valid ones grouped by tool and ordered by tool then tier, all invalid ones in
    one last INVALID band (absent when every id is valid)."""
    valid, invalid = [], []
    for tool_id in sorted(set(ids)):
        ok = tool_id in catalogue if catalogue is not None else looks_valid(tool_id)
        (valid if ok else invalid).append(tool_id)
    families: dict[str, list[str]] = {}
    for tool_id in valid:
        families.setdefault(tool_of(tool_id), []).append(tool_id)
    bands = []
    for tool in sorted(families, key=_family_key):
        members = sorted(families[tool], key=_tier_key)
        bands += [Band(t, tool, (t,), i, len(members)) for i, t in enumerate(members)]
    if invalid:
        bands.append(Band(INVALID, INVALID, tuple(invalid)))
    return bands


def band_shares(mix: Mapping[str, float], bands: list[Band]) -> list[float]:
    """The share of each band in one tool mix (tool id -> share); an invalid band sums all its ids."""
    return [sum(float(mix.get(t, 0.0)) for t in band.ids) for band in bands]
