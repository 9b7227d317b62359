"""Routes as fixed plans, and the outcome table of playing them: what the estimator router learns from.

A plan is a short fixed sequence of tool calls ending with `answer`: `answer` with one tier alone, or after one
call of another tool (search, enhance_reasoning, ...) with one of its tiers. Every route a one- or two-call
orchestrator can take is one plan, so "which route suits this task under this preference" becomes a choice
among a few named plans (cpu_tiny: 12).

Exploration plays every plan once on each training task through the real agent loop and tools (scripted
engines, orchestra/agent/scripted.py), scored like any episode; the resulting `Outcome` rows (correct, $, seconds per
task and plan) are the data the estimator router is fitted on. On replay zoos they are the recorded outcomes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

ADAPTIVE_TOOLS = ("consult", "submit")


@dataclass(frozen=True)
class Plan:
    """A named route: (tool, tier) calls in order, the last one `answer`."""

    name: str
    calls: tuple[tuple[str, str], ...]

    def texts(self) -> list[str]:
        """The tool-call texts a scripted engine emits, one per turn."""
        from orchestra.agent.parse import call_text

        return [call_text(tool, {"model": tier}) for tool, tier in self.calls]

    def tool_counts(self) -> dict[str, int]:
        """Turns per tier id: what the `tool:<id>` preference weights count (reward/rubric.py)."""
        return dict(Counter(tier for _tool, tier in self.calls))

    def describe(self) -> str:
        return " -> ".join(f"{tool}({tier})" for tool, tier in self.calls)


def enumerate_plans(schemas: list[dict[str, Any]], final_tool: str = "answer") -> list[Plan]:
    """Every plan over a tool catalogue: each `final_tool` tier alone, then after each tier of each other tool.
    Plan names: `answer-1`, `search-1+answer-1`, ... (the tiers, joined by '+')."""
    from orchestra.agent.parse import tiers_of

    by_name = {s.get("function", s).get("name"): tiers_of(s) for s in schemas}
    plans: list[Plan] = []
    for answer in by_name.get(final_tool, []):
        plans.append(Plan(answer, ((final_tool, answer),)))
        for tool, tiers in sorted(by_name.items()):
            if tool in (final_tool, *ADAPTIVE_TOOLS):  # consult / submit make adaptive plans (routing/cascade.py)
                continue
            for tier in tiers:
                plans.append(Plan(f"{tier}+{answer}", ((tool, tier), (final_tool, answer))))
    return plans


@dataclass
class Outcome:
    """One plan played on one task: what the estimator learns to predict."""

    task_id: str
    plan: str
    correct: bool
    cost_usd: float
    latency_s: float
    seed: int = 0
    answer: str | None = None  # the final answer: what cascades compare (orchestra/routing/cascade.py)

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> Outcome:
        """From an evaluator record (orchestra.eval.runner.Evaluator: `policy` is the plan's name)."""
        answer = r.get("answer")
        return cls(str(r["task_id"]), str(r["policy"]), bool(r["correct"]), float(r["cost_usd"]),
                   float(r["latency_s"]), int(r.get("seed", 0)), None if answer is None else str(answer))


def plan_scripts(schemas: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Plan name -> tool-call texts of every plan `enumerate_plans` lists: what the family-router bound
    (orchestra/eval/routing_bound.py) runs where outcomes are not recorded."""
    return {plan.name: plan.texts() for plan in enumerate_plans(schemas)}
