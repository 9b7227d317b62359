"""Fixed-router baselines as scripts: the tool-call texts each baseline emits for a task.

Every policy runs through the SAME AgentLoop, tools and accounting (orchestra/eval/runner.py): baselines are
scripted engines (orchestra.agent.scripted) that emit fixed tool calls. Baselines:
  strongest  `answer` with the tier whose expert costs most per nominal call (1k tokens in, its typical out;
             the callers rank tiers with tools/registry.py `tier_costs`)
  cheapest   `answer` with the tier that costs least
  random     `answer` with a uniformly random tier (seeded per task and seed)
  heuristic  family keywords -> tiers (`HEURISTIC_RULES`, written for the template families; a rule whose
             tier the task lacks is skipped; the fallback is the median-cost answer tier)
  oracle     replay zoos only: the cheapest tier whose replayed model was recorded right (else the cheapest)
"""

from __future__ import annotations

import math
import random
import re
from typing import Any

from orchestra.agent.scripted import call_text, tiers_of
from orchestra.types import Task

BASELINES = ("strongest", "cheapest", "random", "heuristic", "oracle")
# The frontier the orchestrator is judged against: routers that do not look at the answers (the oracle does;
# it is an upper reference point, not a router anyone could deploy).
FIXED_ROUTERS = ("strongest", "cheapest", "random", "heuristic")
# (regex on the problem, calls as (tool, tier)); the last call must be `answer`.
HEURISTIC_RULES: list[tuple[str, list[tuple[str, str]]]] = [
    (r"^Puzzle:", [("answer", "answer-1")]),
    (r"^Code:", [("answer", "answer-2")]),
    (r" boxes of |How many", [("answer", "answer-math-2")]),
    (r"^(Who|Where|Which|In which|In what)\b", [("search", "search-3"), ("answer", "answer-3")]),
]


def _answer_tiers(schemas: list[dict[str, Any]]) -> list[str]:
    for s in schemas:
        if s.get("function", s).get("name") == "answer":
            return tiers_of(s)
    return []


def oracle_tier(task: Task, tiers: list[str], costs: dict[str, float], experts: dict[str, Any]) -> str:
    """Cheapest tier whose replayed model was recorded right on this question (replay experts only)."""
    qid = str(task.meta.get("question_id", task.id))
    ranked = sorted(tiers, key=lambda t: costs.get(t, math.inf))
    for tier in ranked:
        e = experts.get(task.model_mapping.get(tier, ""))
        records = e.records() if hasattr(e, "records") else None
        if records is None:
            raise ValueError("the oracle baseline needs replay experts (recorded outcomes); this zoo has none")
        rec = records.get(qid)
        if rec is not None and rec.correct:
            return tier
    return ranked[0]


def baseline_script(name: str, task: Task, schemas: list[dict[str, Any]], costs: dict[str, float], seed: int,
                    experts: dict[str, Any] | None = None) -> list[str]:
    """The tool-call texts baseline `name` emits for `task`, one per turn."""
    tiers = _answer_tiers(schemas)
    if not tiers:
        raise ValueError(f"task {task.id}: no `answer` tool with tiers among {[s.get('function', s).get('name') for s in schemas]}")
    ranked = sorted(tiers, key=lambda t: (costs.get(t, math.inf), t))
    if name == "strongest":
        return [call_text("answer", {"model": ranked[-1]})]
    if name == "cheapest":
        return [call_text("answer", {"model": ranked[0]})]
    if name == "random":
        return [call_text("answer", {"model": random.Random(f"{seed}:{task.id}").choice(tiers)})]
    if name == "oracle":
        return [call_text("answer", {"model": oracle_tier(task, tiers, costs, experts or {})})]
    if name == "heuristic":
        offered = {s.get("function", s).get("name"): set(tiers_of(s)) for s in schemas}
        for pattern, calls in HEURISTIC_RULES:
            if re.search(pattern, task.problem) and all(tier in offered.get(tool, ()) for tool, tier in calls):
                return [call_text(tool, {"model": tier}) for tool, tier in calls]
        return [call_text("answer", {"model": ranked[len(ranked) // 2]})]
    raise ValueError(f"unknown baseline {name!r}; choose one of {BASELINES}")
