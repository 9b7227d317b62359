"""Gold replay of a τ² domain: every task's gold actions through our adapter, scored by the official evaluator.

What anyone bringing a domain (a shipped one with their own db / policy / tasks, or a synthesised ToolScale-style
one) needs first: if the gold actions do not score 1.0 through our tools, no policy can. Per task:
1. a fresh session (tools/tau2/adapter.py); the agent's gold actions go through our tool client
   (tools.base.LocalToolClient over the domain tools, each call's arguments checked against its schema), the
   user's gold actions (dual-control domains such as telecom) straight to the user's tools, as τ²'s user does;
2. the agent then says the task's communicate info, the user stops, and the official evaluator scores it;
3. with `drop_last_write`, the same again without the task's last write: a task whose outcome the evaluator
   checks must now score 0 (a task that still scores 1 is one the evaluator cannot tell from doing nothing).
τ² logs a loguru warning each time one of its own gold actions raises in the evaluator's gold environment
(some tasks' gold actions fail by design); `collect_tau2_warnings` counts them per task instead of printing each.
The command is cluster/tau2_gold.py.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from orchestra.types import ToolCall, ToolContext
from tools.tau2.adapter import Tau2Sessions, domain_tools
from tools.tau2.domain import WARNING_HOOKS, Tau2Domain, to_task
from tools.tau2.reward import Tau2Score, score_session


def gold_actions(tau2_task: Any, requestors: tuple[str, ...] = ("assistant", "user")) -> list[Any]:
    crit = tau2_task.evaluation_criteria
    return [a for a in (crit.actions or []) if a.requestor in requestors] if crit else []


def last_write_index(domain: Tau2Domain, actions: list[Any]) -> int | None:
    idx = [i for i, a in enumerate(actions) if a.requestor == "assistant" and a.name in domain.write_tools]
    return idx[-1] if idx else None


async def replay(domain: Tau2Domain, tau2_task: Any, version: str = "v0.2.0", skip: int | None = None,
                 episode_id: str = "gold") -> tuple[Tau2Score, list[str]]:
    """Run the task's gold actions (minus index `skip`), say the communicate info, score as a user stop.
    Returns the score and the calls our schema check refused (an adapter bug, or a wrong gold action)."""
    from tools.base import LocalToolClient

    task = to_task(tau2_task, domain.ref, version)
    sessions = Tau2Sessions(domain)
    client = LocalToolClient(domain_tools(domain, sessions))
    session = sessions.get(episode_id, task)
    refused = []
    for i, action in enumerate(gold_actions(tau2_task)):
        if i == skip:
            continue
        if action.requestor == "user":  # the user acts on their own device: our agent tools are not involved
            session.tool_call(action.name, dict(action.arguments), requestor="user")
            continue
        result = await client.call(ToolCall(action.name, dict(action.arguments)),
                                   ToolContext(task=task, episode_id=episode_id))
        if result.meta.get("invalid_arguments"):
            refused.append(f"{action.name}: {result.text}")
    info = tau2_task.evaluation_criteria.communicate_info or [] if tau2_task.evaluation_criteria else []
    session.agent_says(("Here is what I found: " + "; ".join(info)) if info else "Your request is done.")
    return score_session(session, "user_stop"), refused


@dataclass
class GoldReport:
    """Pass counts of one domain's gold replay."""

    domain: str
    tasks: int = 0
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # task id -> why (score breakdown or refused calls)
    without_actions: list[str] = field(default_factory=list)  # nothing to replay: not scored
    dropped_zero: list[str] = field(default_factory=list)  # last write dropped -> scored 0, as it should
    dropped_still_pass: list[str] = field(default_factory=list)  # last write dropped, still 1: unchecked outcome
    no_write: list[str] = field(default_factory=list)  # gold actions without a write: nothing to drop
    warnings: Counter = field(default_factory=Counter)  # task id -> τ² warnings logged while replaying it

    def lines(self) -> list[str]:
        replayed = self.tasks - len(self.without_actions)
        out = [f"{self.domain}: gold actions pass {len(self.passed)}/{replayed} tasks"
               + (f" ({len(self.without_actions)} more have no gold actions to replay)" if self.without_actions else "")]
        dropped = len(self.dropped_zero) + len(self.dropped_still_pass)
        if dropped:
            out.append(f"{self.domain}: without each task's last write, {len(self.dropped_zero)}/{dropped} score 0"
                       + (f"; still 1: {', '.join(self.dropped_still_pass[:8])}" if self.dropped_still_pass else ""))
        for tid, why in list(self.failed.items())[:10]:
            out.append(f"  FAIL {tid}: {why[:300]}")
        if self.warnings:
            out.append(f"{self.domain}: τ² logged {sum(self.warnings.values())} warnings on {len(self.warnings)} "
                       "tasks (its gold environment's own failing gold actions, by design in some tasks); "
                       "ORCHESTRA_TAU2_LOG_LEVEL=WARNING prints them")
        return out


@contextlib.contextmanager
def collect_tau2_warnings(counts: Counter, current: list[str]) -> Iterator[None]:
    """Count τ²'s loguru warnings under the task id in `current[0]` instead of printing them (unless
    ORCHESTRA_TAU2_LOG_LEVEL asks for them: then they print as usual)."""
    hook = lambda _record: counts.update([current[0]])  # noqa: E731
    WARNING_HOOKS.append(hook)
    try:
        yield
    finally:
        WARNING_HOOKS.remove(hook)


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    import logging

    log = logging.getLogger(name)
    before, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = before


async def replay_domain(domain: Tau2Domain, tasks: list[Any], version: str = "v0.2.0",
                        drop_last_write: bool = True) -> GoldReport:
    report, current = GoldReport(domain.name, len(tasks)), [""]
    with collect_tau2_warnings(report.warnings, current):
        for t in tasks:
            current[0] = t.id
            actions = gold_actions(t)
            if not actions:  # e.g. an env assertion the agent must bring about: nothing to replay
                report.without_actions.append(t.id)
                continue
            score, refused = await replay(domain, t, version)
            if score.correct and score.score == 1.0 and not refused:
                report.passed.append(t.id)
            else:
                report.failed[t.id] = "; ".join(refused) or f"score {score.score}: {score.to_dict()}"
            skip = last_write_index(domain, actions)
            if not drop_last_write:
                continue
            if skip is None:
                report.no_write.append(t.id)
                continue
            with _quiet("tools.tau2.reward"):  # a dropped write may make the evaluator raise: expected here
                dropped, _ = await replay(domain, t, version, skip=skip)
            (report.dropped_zero if not dropped.correct else report.dropped_still_pass).append(t.id)
    return report
