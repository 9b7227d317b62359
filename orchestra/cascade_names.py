"""The cascade-name grammar: `a&b>c`, `a&b>c>d`, `a?>c` (orchestra/routing/cascade.py says what each plays).

A name is the whole rule, so configs (`sft.cascade`), route hints and plan tables carry cascades as strings; this
module parses and writes them, and nothing else. It imports nothing of the core, so the configuration's checks and
the prompt's router line read the grammar without reaching up to routing/, where cascades are played and scored.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cascade:
    """`consult` tiers in order, submitting when the rule is met, else `answer` with `final` (the rule is played
    by orchestra/routing/cascade.py `decide`). kind: pair (consult 2, agree -> submit the first), no_answer
    (consult 1, an answer -> submit it), three (consult 2; if they disagree, consult a third and submit it when it
    agrees with either)."""

    kind: str
    consult: tuple[str, ...]
    final: str

    def __post_init__(self):
        want = {"pair": 2, "no_answer": 1, "three": 3}.get(self.kind)
        if want is None or len(self.consult) != want:
            raise ValueError(f"a {self.kind!r} cascade consults {want} tiers, got {self.consult}")

    @property
    def name(self) -> str:
        c = self.consult
        if self.kind == "no_answer":
            return f"{c[0]}?>{self.final}"
        return "&".join(c[:2]) + "".join(f">{t}" for t in c[2:]) + f">{self.final}"


def parse(name: str) -> Cascade:
    """The cascade a name describes (`Cascade.name`'s forms)."""
    if "?>" in name:
        first, final = name.split("?>")
        return Cascade("no_answer", (first,), final)
    head, *rest = name.split(">")
    pair = tuple(head.split("&"))
    if len(pair) != 2 or not rest or len(rest) > 2:
        raise ValueError(f"not a cascade name: {name!r} (a&b>c, a&b>c>d or a?>c)")
    return Cascade("pair", pair, rest[0]) if len(rest) == 1 else Cascade("three", (*pair, rest[0]), rest[1])


def is_cascade(name: str) -> bool:
    return "&" in name or "?>" in name


def describe(name: str) -> str:
    """A cascade as the route hint writes it: the calls in order and when it escalates."""
    c = parse(name)
    first = ", then ".join(f"consult {t}" for t in c.consult[:2])
    if c.kind == "no_answer":
        return f"consult {c.consult[0]}; if no answer, answer {c.final}"
    if c.kind == "pair":
        return f"{first}; if they differ, answer {c.final}"
    return f"{first}; if they differ, consult {c.consult[2]}; if it agrees with neither, answer {c.final}"
