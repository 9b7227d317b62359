"""Replay a τ² task's gold actions through our adapter (tools.base.LocalToolClient over the domain tools,
each call validated by guarded_call) and score the transcript with the official evaluator."""

from __future__ import annotations

from orchestra.tau2.adapter import Tau2Sessions, domain_tools
from orchestra.tau2.domain import to_task
from orchestra.tau2.reward import score_session
from orchestra.types import ToolCall, ToolContext
from tools.base import LocalToolClient


def gold_actions(tau2_task):
    crit = tau2_task.evaluation_criteria
    return [a for a in (crit.actions or []) if a.requestor == "assistant"] if crit else []


def last_write_index(domain, actions) -> int | None:
    idx = [i for i, a in enumerate(actions) if a.name in domain.write_tools]
    return idx[-1] if idx else None


async def replay(domain, tau2_task, version="v0.2.0", skip: int | None = None, episode_id="replay"):
    """Run the gold actions (minus index `skip`), say the communicate info, score as a user stop."""
    task = to_task(tau2_task, domain.name, version)
    sessions = Tau2Sessions(domain)
    client = LocalToolClient(domain_tools(domain, sessions))
    session = sessions.get(episode_id, task)
    errors = []
    for i, action in enumerate(gold_actions(tau2_task)):
        if i == skip:
            continue
        result = await client.call(ToolCall(action.name, dict(action.arguments)),
                                   ToolContext(task=task, episode_id=episode_id))
        if result.meta.get("invalid_arguments"):  # our schema check refused a gold call: an adapter bug
            errors.append(result.text)
    info = tau2_task.evaluation_criteria.communicate_info or []
    session.agent_says(("Here is what I found: " + "; ".join(info)) if info else "Your request is done.")
    return score_session(session, "user_stop"), errors
