"""Template mode of the synthesis pipeline: the embedded default's task set, offline, deterministic, seeded.

`generate_tasks(n, seed, families, split)` -> TaskSet(tasks, corpus). Families (orchestra.data.synth.families):
arith, lookup, reasoning, code; each task carries meta family / difficulty (1..3) / distractors (and
`code`, `doc_ids` where they apply), the orchestrator tool catalogue, the zoo's tier mapping and a
training preference drawn by orchestra.preferences.sample_preference.

Held-out split: a problem belongs to `heldout` iff the first byte of sha1(problem text) is < 52 (about
20% of problem space), else to `train`; generation draws candidates until it has n problems of its own split,
so train and heldout never share a problem whatever their seeds and sizes. The lookup family's world
(and so the corpus) depends on the seed only, so train and held-out questions read one consistent corpus.
Func-call (ToolScale DB) tasks come from orchestra.data.synth.stages; this module does only the QA families.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from orchestra.data.synth import families as fam
from orchestra.preferences import sample_preference
from orchestra.types import Task

FAMILIES = ("arith", "lookup", "reasoning", "code")
SPLITS = ("train", "heldout")
# a task's catalogue; a zoo that lacks one of them simply does not offer it (tools/base.LocalToolClient.schemas).
# consult / submit: adaptive plans that read what an expert answered (orchestra/agent/consults.py)
ORCHESTRATOR_TOOLS = ["search", "enhance_reasoning", "answer", "consult", "submit"]
_HELDOUT_BYTE = 52  # sha1 first byte < 52 -> heldout (52/256 ~ 20%)


@dataclass
class TaskSet:
    tasks: list[Task]
    corpus: list[dict[str, str]] = field(default_factory=list)  # {id, title, text}


def split_of(problem: str) -> str:
    """Which split a problem text belongs to (fixed by its content, never by a seed)."""
    return "heldout" if hashlib.sha1(problem.encode()).digest()[0] < _HELDOUT_BYTE else "train"


def default_tiers() -> dict[str, str]:
    """The configured zoo's tier -> expert mapping (conf/zoo via orchestra.config)."""
    from orchestra.config import load_config

    return dict(load_config().zoo.tiers)


def generate_tasks(n: int, seed: int, families: list[str] | None = None, split: str = "train",
                   mapping: dict[str, str] | None = None, tools: list[str] | None = None,
                   pref: dict[str, float] | None = None, draw: int | None = None,
                   exclude: set[str] | frozenset[str] = frozenset()) -> TaskSet:
    """n tasks of the given families (round-robin, so the mix is balanced), reproducible from `seed`.

    mapping: tier -> expert (default: the configured zoo's tiers). pref: a fixed preference for every task
    (evaluation); default: one sampled per task (training scheme). draw (data.heldout_seed): another draw of the
    split's problems from the same world (the lookup family's corpus is `seed`'s), with ids of its own; None: the
    draw the seed's own streams give. Which split a problem is in depends on its text only, so every draw of the
    held-out split is disjoint from every training split. exclude: problem texts never to draw (another draw's)."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    families = list(families or FAMILIES)
    bad = [f for f in families if f not in FAMILIES]
    if bad or not families:
        raise ValueError(f"unknown task families {bad}; choose from {list(FAMILIES)}")
    mapping = dict(default_tiers() if mapping is None else mapping)
    tools = list(tools or ORCHESTRATOR_TOOLS)
    world = fam.World(seed) if "lookup" in families else None
    tag = f"{seed}" if draw is None else f"{seed}d{draw}"
    pref_rng = random.Random(f"pref:{tag}:{split}")
    # one stream per family: shared by both splits (a draw has streams of its own)
    rngs = {f: random.Random(f"{f}:{seed}" if draw is None else f"{f}:{seed}:draw{draw}") for f in families}
    seen: set[str] = set(exclude)
    tasks: list[Task] = []
    for i in range(n):
        family = families[i % len(families)]
        rng = rngs[family]
        for _attempt in range(5000):
            difficulty = rng.randint(1, 3)
            p = fam.lookup(rng, difficulty, world) if family == "lookup" else getattr(fam, family)(rng, difficulty)
            if p.problem not in seen and split_of(p.problem) == split:
                break
        else:
            raise ValueError(f"family {family!r} ran out of distinct {split} problems after {len(seen)} tasks; "
                             "ask for fewer tasks")
        seen.add(p.problem)
        meta = {"family": family, "difficulty": difficulty, "distractors": p.distractors, "kind": p.kind,
                "split": split}
        if p.code:
            meta["code"] = p.code
        if p.doc_ids:
            meta["doc_ids"] = p.doc_ids
        tasks.append(Task(id=f"{split}-{family}-{tag}-{i:05d}", problem=p.problem, answer=p.answer,
                          category="qa", data_source=f"synthetic/{family}", tools=list(tools),
                          model_mapping=dict(mapping),
                          pref=dict(pref) if pref is not None else sample_preference(pref_rng, list(mapping)),
                          meta=meta))
    return TaskSet(tasks=tasks, corpus=world.passages() if world else [])
