"""Where tasks come from, and how their episodes are played and judged: two registries keyed by a prefix.

- Task sources (`data.source`, evaluation's `dataset=`): `template` (the synthesis pipeline's offline families),
  `loader:<name>:<path>` (orchestra/data/loaders.py), a path to a Task JSONL/parquet file (its corpus beside it
  as `<stem>.corpus.jsonl`, when there is one), and those integrations register (`tau2:<domain>...`,
  tools/tau2/wiring.py). `build_task_set(data_cfg, tiers)` -> (train, heldout, corpus): sources that do not
  split themselves are filtered by family, given the tier mapping and split by seed; training tasks then get
  their preference vectors (`data.preference`). `build_router_pool` takes the next tasks of that split for
  `router.extra_tasks`.
- Episode kinds, by a task's `data_source` prefix: the runner that plays its episodes and the judge that decides
  them. A data source no integration registered plays through the agent loop and is judged on its answer
  string by reward/judges.py; τ² registers a three-party driver judged by the official evaluator.
The registries are here, in the core, so that reward/ and actors/ can look them up without importing the
integrations that fill them in; a process that may meet an integration's tasks imports its wiring module.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestra.data.tasks import load_corpus, load_tasks
from orchestra.types import Task, Trajectory

Corpus = list[dict[str, str]]
# (spec, data config, tier mapping) -> (tasks, held-out tasks when the source splits itself else None, corpus)
TaskSource = Callable[[str, Any, dict[str, str] | None], tuple[list[Task], list[Task] | None, Corpus]]
TASK_SOURCES: dict[str, TaskSource] = {}
NAMED_SPLITS: set[str] = set()  # prefixes of the sources that read `data.splits` (their own split files)


def register_task_source(prefix: str, load: TaskSource, named_splits: bool = False) -> None:
    """`prefix`: a whole spec (`template`) or a prefix ending in `:` (`loader:`, `tau2:`); `named_splits`: the
    source reads `data.splits` (any other source with it set is a config error)."""
    TASK_SOURCES[prefix] = load
    if named_splits:
        NAMED_SPLITS.add(prefix)


def _template(spec: str, data_cfg: Any, tiers: dict[str, str] | None) -> tuple[list[Task], list[Task], Corpus]:
    from orchestra.data.synth.template import generate_tasks

    families = list(data_cfg.families) or None
    train = generate_tasks(data_cfg.n_train, data_cfg.seed, families, "train", mapping=tiers)
    held = generate_tasks(data_cfg.n_heldout, data_cfg.seed, families, "heldout", mapping=tiers)
    draw = getattr(data_cfg, "heldout_seed", None)
    if draw is not None:  # another draw, none of whose problems the seed's own draw holds
        held = generate_tasks(data_cfg.n_heldout, data_cfg.seed, families, "heldout", mapping=tiers, draw=draw,
                              exclude={t.problem for t in held.tasks})
    corpus = {p["id"]: p for p in train.corpus + held.corpus}
    return train.tasks, held.tasks, list(corpus.values())


def _loader(spec: str, data_cfg: Any, tiers: dict[str, str] | None) -> tuple[list[Task], None, Corpus]:
    from orchestra.data.loaders import load

    _, name, path = (spec.split(":", 2) + [""])[:3]
    loaded = load(name, path, mapping=tiers)
    return loaded.tasks, None, loaded.corpus


def _task_file(spec: str, data_cfg: Any, tiers: dict[str, str] | None) -> tuple[list[Task], None, Corpus]:
    path = Path(spec)
    side = path.with_name(path.name.split(".")[0] + ".corpus.jsonl")
    return load_tasks(path), None, load_corpus(side) if side.is_file() else []


register_task_source("template", _template)
register_task_source("loader:", _loader)


def task_source(spec: str) -> TaskSource:
    """The registered source for `spec`; a spec with no registered prefix is a task file's path."""
    for prefix, load in TASK_SOURCES.items():
        if spec == prefix or (prefix.endswith(":") and spec.startswith(prefix)):
            return load
    head = spec.split(":", 1)[0]
    if ":" in spec and head.isidentifier():  # `name:...` names a source, not a file: say which exist
        raise ValueError(f"unknown task source {head + ':'!r}; registered: {sorted(TASK_SOURCES)}, or a path "
                         "to a Task .jsonl / .parquet file (the tau2: source needs tools.tau2.wiring imported)")
    return _task_file


def split_order(tasks: list[Task], seed: int) -> list[Task]:
    """The seeded order a loaded set is split in: held-out first, then train, then `router.extra_tasks`."""
    order = list(tasks)
    random.Random(f"split:{seed}").shuffle(order)
    return order


def split_rest(tasks: list[Task], n_heldout: int, seed: int, heldout_seed: int | None = None
               ) -> tuple[list[Task], list[Task]]:
    """(held-out tasks, the rest in the order training and router.extra_tasks take them). `seed`'s order holds the
    held-out tasks first; another draw (data.heldout_seed) takes the first `n_heldout` of the order `heldout_seed`
    shuffles that `seed`'s own held-out tasks are not among, and leaves the rest in `seed`'s order with `seed`'s own
    held-out tasks last: training keeps its tasks but for the few the new draw holds."""
    order = split_order(tasks, seed)
    if heldout_seed is None:
        return order[:n_heldout], order[n_heldout:]
    own = {id(t) for t in order[:n_heldout]}
    held = [t for t in split_order(tasks, heldout_seed) if id(t) not in own][:n_heldout]
    ids = {id(t) for t in held}
    return held, [t for t in order[n_heldout:] + order[:n_heldout] if id(t) not in ids]


def split_tasks(tasks: list[Task], n_train: int, n_heldout: int, seed: int, heldout_seed: int | None = None
                ) -> tuple[list[Task], list[Task]]:
    """Deterministic disjoint split of a loaded set: shuffle by seed, held-out first, then train (`split_rest`)."""
    heldout, rest = split_rest(tasks, n_heldout, seed, heldout_seed)
    train = rest[:n_train]
    if not train:
        raise ValueError(f"only {len(tasks)} tasks: nothing left for training after {n_heldout} held out")
    return train, heldout


def build_task_set(data_cfg: Any, tiers: dict[str, str] | None = None) -> tuple[list[Task], list[Task], Corpus]:
    """(train, heldout, corpus) from DataConfig (source, n_train, n_heldout, families, seed, heldout_seed,
    preference)."""
    source = str(data_cfg.source)
    load = task_source(source)
    if getattr(data_cfg, "splits", "") and not any(TASK_SOURCES.get(p) is load for p in NAMED_SPLITS):
        raise ValueError(f"data.splits={data_cfg.splits!r}: the source {source!r} has no named splits (τ² domains "
                         "have); leave data.splits empty to split by seed")
    tasks, heldout, corpus = load(source, data_cfg, tiers)
    if heldout is None:
        tasks, heldout = split_tasks(_prepared(tasks, data_cfg, tiers), data_cfg.n_train, data_cfg.n_heldout,
                                     data_cfg.seed, getattr(data_cfg, "heldout_seed", None))
    return _with_preference(tasks, data_cfg), heldout, corpus


def build_router_pool(data_cfg: Any, n: int, tiers: dict[str, str] | None = None) -> list[Task]:
    """`router.extra_tasks`: `n` more tasks of a loaded set split by seed, the next ones in the split's order after
    its held-out and training tasks (`split_order`), so disjoint from both and the same for the same seed. Only the
    estimator router is fitted on them (their exploration is the recorded outcomes on a replay zoo or routing log);
    the policy never trains on them. Sources that generate or split their own tasks (the template, τ²) have none."""
    source = str(data_cfg.source)
    tasks, heldout, _ = task_source(source)(source, data_cfg, tiers)
    if heldout is not None:
        raise ValueError(f"router.extra_tasks={n}: the source {source!r} generates or splits its own tasks; extra "
                         "router tasks come from a loaded set split by seed (loader:..., a task file)")
    _, rest = split_rest(_prepared(tasks, data_cfg, tiers), data_cfg.n_heldout, data_cfg.seed,
                         getattr(data_cfg, "heldout_seed", None))
    pool = rest[data_cfg.n_train:data_cfg.n_train + n]
    if len(pool) < n:
        raise ValueError(f"router.extra_tasks={n}: the source {source!r} has only {len(pool)} tasks after the "
                         f"{data_cfg.n_heldout} held-out and {data_cfg.n_train} training ones")
    return pool


def _prepared(tasks: list[Task], data_cfg: Any, tiers: dict[str, str] | None) -> list[Task]:
    """A loaded set cut to `data.families` and given the tier mapping (tasks that bring their own keep it)."""
    families = list(data_cfg.families) or None
    if families:
        tasks = [t for t in tasks if t.meta.get("family") in families]
    if tiers:
        for t in tasks:
            t.model_mapping = t.model_mapping or dict(tiers)
    return tasks


def _with_preference(train: list[Task], data_cfg: Any) -> list[Task]:
    """`data.preference`: `sampled` keeps each task's own vector and draws one (seeded by the task id, as
    ToolOrchestra) for tasks that came without (benchmark loaders, files); a preset name or
    `accuracy=1,cost=0.5` gives every training task that one vector; `A|B|...` (presets or weight strings)
    gives each task one of them, drawn seeded by the task id, so training covers exactly the trade-offs an
    evaluation compares."""
    from orchestra.preferences import parse_preference, sample_preference

    spec = str(getattr(data_cfg, "preference", "sampled"))
    seed = getattr(data_cfg, "seed", 0)
    if spec == "sampled":
        for t in train:
            if not t.pref:  # an empty vector weighs nothing: every episode would score 0
                t.pref = sample_preference(random.Random(f"pref:{seed}:{t.id}"), list(t.model_mapping))
        return train
    choices = [parse_preference(part) for part in spec.split("|")]
    for t in train:
        pick = choices[0] if len(choices) == 1 else random.Random(f"pref:{seed}:{t.id}").choice(choices)
        t.pref = dict(pick)
    return train


# ---------------------------------------------------------------- episode kinds
class EpisodeRunner(Protocol):
    """What plays one episode of a task (orchestra.agent.loop.AgentLoop has this `run`)."""

    async def run(self, task: Task, sampling: Any, uid: str = "", episode_id: str = "",
                  policy_version: int = 0) -> Trajectory: ...


@dataclass(frozen=True)
class RunnerParts:
    """What a rollout worker lends an episode runner: its engine and prompter, the end-of-turn ids, the agent
    loop's limits, and the config sections a runner may read (`zoo`, `tau2`, ...) as plain dicts."""

    engine: Any
    prompter: Any
    eos_token_ids: list[int]
    agent_kwargs: dict[str, Any]
    sections: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class EpisodeKind:
    """How episodes of a data source are played and judged: `runner(parts)` builds its runner (once per rollout
    worker, on first use); `judge(traj)` gives its verdict, an orchestra.types.Judgement (no gold string needed)."""

    runner: Callable[[RunnerParts], EpisodeRunner]
    judge: Callable[[Trajectory], Any]


EPISODE_KINDS: dict[str, EpisodeKind] = {}


def register_episode_kind(prefix: str, kind: EpisodeKind) -> None:
    """`prefix` of the data_source, e.g. `tau2/`."""
    EPISODE_KINDS[prefix] = kind


def episode_kind(data_source: str) -> tuple[str, EpisodeKind] | None:
    """(prefix, kind) registered for a data source (the longest matching prefix), or None: the agent loop and
    the answer judges."""
    found = [p for p in EPISODE_KINDS if str(data_source).startswith(p)]
    if not found:
        return None
    prefix = max(found, key=len)
    return prefix, EPISODE_KINDS[prefix]
