"""The SFT teachers (`sft.teacher`): where a warm start's demonstrations come from. One module of this package per
teacher, named as the teacher, defining `demonstrations(teaching: Teaching) -> (samples, report)`; the registry is
orchestra.config.schema.TEACHERS (the names the config accepts), and `teacher(name)` imports the module of a name.
So a new teacher is one file here and one name there. The teachers:

- random (random.py): random tool and tier choices, teaching the format only (best of `sft.candidates` in hindsight);
- expected_value (expected_value.py): exploration -> the run's learned routers (the estimator router) -> the plan a
  cross-fitted estimator rates best per (task, preference vector);
- cascade (cascade.py): a cascade's two consults, then escalating or submitting (RL's positive control).

What a teacher is handed is `Teaching`: the run's config, its tool servers (a ToolClient), the policy's tokenizer, the
training tasks, and the driver's progress bars and console. The SFT steps on the samples are cluster/warm_start.py's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from orchestra.config.schema import TEACHERS
from orchestra.types import Task


@dataclass(frozen=True)
class Teaching:
    """What every teacher is handed."""

    cfg: Any  # the experiment config (sft.*, router.*, agent.*, ...)
    tools: Any  # a ToolClient over the run's tool servers: demonstrations are played through them
    tokenizer: Any
    tasks: list[Task]  # the training tasks
    bars: Any  # cluster/progress.py Bars
    console: Any  # a rich Console


class Teacher(Protocol):
    def __call__(self, teaching: Teaching) -> tuple[list[Any], dict[str, Any]]:
        """(SFT samples, report: figures for the run's summary)."""
        ...


def teacher(name: str) -> Teacher:
    """The teacher registered as `name`: its module's `demonstrations`; ValueError naming the ones there are."""
    if name not in TEACHERS:
        raise ValueError(f"unknown sft.teacher {name!r}; choose one of {', '.join(TEACHERS)}")
    return importlib.import_module(f"{__name__}.{name}").demonstrations


def note(cfg: Any) -> Callable[[str], str] | None:
    """What every scripted demonstration's call opens with: the prompt's preference restated in bin words
    (sft.restate_preference; read from its numbers when the prompt shows no words), or none."""
    from functools import partial

    from orchestra.agent.prompt import preference_note

    if not cfg.sft.restate_preference:
        return None
    return partial(preference_note, bounds=tuple(cfg.agent.preference_levels),
                   latency_words=tuple(cfg.agent.latency_words), numbers=cfg.sft.note_numbers)
