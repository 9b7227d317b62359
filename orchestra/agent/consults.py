"""The answers an episode's experts gave through `consult`, and `submit`: ending with one of them at no cost.

An orchestrator that reads what its experts answer can escalate when two disagree, and stop when they agree without
paying for another call. `consult(model)` (tools/orchestra_tools.py) returns an expert's extracted answer as the
result's `candidate`; the episode keeps them here by tier, the prompt shows them (orchestra/agent/prompt.py: an
"Expert answers" section, or Orchestrator-8B's "Attempt answer by <model>" lines), and `submit(model)` adopts the
one that tier gave. Submitting is the episode's business, not a tool's (it needs the episode's answers), so the agent
loop carries it out with `Consults.submit`; the submit record copies the consult's evaluation-only verdicts
(`sim_correct`, `recorded_correct`), so the judges score a submitted answer as they would score that expert's.
"""

from __future__ import annotations

import re

from orchestra.types import ToolCall, ToolRecord, ToolResult

SUBMIT_TOOL = "submit"
# agreement folds case, spaces, brackets and stops; these read as "no answer"
_FOLD = re.compile(r"[\s()\[\].:]+")
NO_ANSWER_MARKERS = ("", "(no answer recorded)", "none", "unknown")


def fold(answer: str | None) -> str | None:
    """An answer as agreement compares it; None when there is none to compare."""
    raw = "" if answer is None else str(answer).strip().lower()
    if raw in NO_ANSWER_MARKERS or raw.startswith("(no response recorded"):
        return None
    return _FOLD.sub(" ", raw).strip() or None


def agree(a: str | None, b: str | None) -> bool:
    """Two answers agree when equal after case, space and bracket folding ("(B)" = "b"); a missing answer agrees
    with nothing. The rule the prompt's answers heading, the cascades (orchestra/routing/cascade.py) and the
    escalation figures (orchestra/eval/escalation.py) all apply."""
    fa, fb = fold(a), fold(b)
    return fa is not None and fa == fb


_KEPT = ("model", "tier", "sim_correct", "recorded_correct", "response_recorded", "simulated", "replay")


class Consults:
    """The consulted tiers' latest answers, in the order they came."""

    def __init__(self) -> None:
        self.by_tier: dict[str, ToolRecord] = {}

    def note(self, record: ToolRecord) -> bool:
        """Keep a consult's answer (True), or say the record holds none (False)."""
        if not record.result.ok or record.result.candidate is None:
            return False
        self.by_tier.pop(record.tool_id, None)  # a tier consulted again: its latest answer, listed last
        self.by_tier[record.tool_id] = record
        return True

    def view(self) -> list[dict[str, str]]:
        """What the prompt shows: tier, the model behind it, and its answer."""
        return [{"tier": tier, "model": str(r.result.meta.get("model", tier)), "answer": str(r.result.candidate)}
                for tier, r in self.by_tier.items()]

    def submit(self, call: ToolCall, turn: int) -> ToolRecord:
        """The record of `submit(model)`: the adopted answer ($0, the consult's verdicts carried over), or an error
        naming the tiers that did answer."""
        tier = call.arguments.get("model") if isinstance(call.arguments, dict) else None
        seen = self.by_tier.get(str(tier))
        if seen is None:
            heard = ", ".join(self.by_tier) or "none yet"
            result = ToolResult.failure(f"submit: {tier!r} has not answered in this episode (consulted: {heard}); "
                                        "consult it first, or call answer")
        else:
            keep = {k: v for k, v in seen.result.meta.items() if k in _KEPT}
            result = ToolResult(f"Submitted {tier}'s answer: {seen.result.candidate}", answer=seen.result.candidate,
                                meta={**keep, "submitted_from_turn": seen.turn})
        return ToolRecord(turn=turn, name=call.name, tool_id=call.tool_id, arguments=call.arguments, result=result)
