"""Exploration: every plan played once on each of a set of tasks, through the real agent loop and tools.

The episodes are scripted (orchestra/agent/scripted.py) and scored like any evaluation episode
(orchestra/eval/runner.py: judged, priced, the `scalar` rubric), so an outcome row says what that route
really did on that task: right or wrong, $ and seconds. One exploration serves the estimator router's fit and
every preference vector of the expected-value teacher. Results are appended to `results_path` as they finish,
so an interrupted exploration resumes where it stopped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.eval.runner import Evaluator, Scorer
from orchestra.routing.plans import Outcome, Plan
from orchestra.types import Task


def explore(tasks: list[Task], plans: list[Plan], tools: Any, tokenizer: Any, prompter: Any, eos_token_id: int, *,
            agent_kwargs: dict[str, Any], score: Scorer, concurrency: int = 32,
            results_path: str | Path | None = None,
            on_episode: Callable[[dict[str, Any]], None] | None = None) -> list[Outcome]:
    """Outcome rows for every (task, plan), each task under its own preference (which does not change what a
    fixed plan does; the reward of any other vector is computed from the row)."""
    if not tasks or not plans:
        raise ValueError(f"exploration needs tasks and plans, got {len(tasks)} tasks and {len(plans)} plans")
    ev = Evaluator(tokenizer, prompter, {0: tools}, eos_token_id, agent_kwargs=agent_kwargs, score=score,
                   concurrency=concurrency, results_path=results_path,
                   scripts={p.name: p.texts() for p in plans})
    records = asyncio.run(ev.run(tasks, [p.name for p in plans], {"own": None}, [0], on_episode=on_episode))
    errors = [r for r in records if r["termination"] == "error"]
    if len(errors) == len(records):
        raise RuntimeError(f"every exploration episode failed; the first: {errors[0].get('error')}")
    # an errored episode (a tool server that died) says nothing about the route: left out of the fit
    return [Outcome.from_record(r) for r in records if r["termination"] != "error"]
