"""Score a τ² episode with the official evaluator: the outcome term (`correct`) of our rubrics.

This mirrors tau2's `evaluate_simulation(..., EvaluationType.ALL)` (what `tau2 run` uses): an episode that
did not end by a user or agent stop scores 0; otherwise the environment check (DB hash after replaying our
transcript on a fresh environment vs. the gold actions' DB, and env assertions), the action check and the
communicate check are combined over the task's `reward_basis`. The checks themselves are tau2's own
evaluator classes; only the dispatch is here, so that the environment comes from our cached domain (not
tau2's registry, which imports litellm) and NL assertions run only when a judge is configured
(`nl_judge="openai/<model>"`, with `nl_judge_args` such as api_base): without one, a task whose basis has
NL_ASSERTION is scored on the rest and says so in `info`.

Any evaluator exception scores 0 with the reason logged and returned (`Tau2Score.error`). `correct` is
reward == 1.0, which reward/score.py and reward/rubric.py take as the accuracy feature; `score` is the raw
τ² reward in [0, 1] for the `scalar` rubric.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

STOPS = ("user_stop", "agent_stop")


@dataclass
class Tau2Score:
    score: float
    correct: bool
    breakdown: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "correct": self.correct, "breakdown": self.breakdown, "info": self.info,
                "error": self.error}


def evaluate_messages(domain: Any, tau2_task: Any, messages: list[Any], termination: str = "user_stop",
                      nl_judge: str | None = None, nl_judge_args: dict[str, Any] | None = None) -> Tau2Score:
    """The official τ² reward of one transcript; never raises (a failure scores 0 with its reason)."""
    try:
        return _evaluate(domain, tau2_task, messages, termination, nl_judge, nl_judge_args)
    except Exception as e:
        reason = f"{type(e).__name__}: {e}"
        log.warning("τ² evaluator failed on task %s: %s", getattr(tau2_task, "id", "?"), reason[:500])
        return Tau2Score(0.0, False, info={"note": "evaluator failed"}, error=reason)


def _evaluate(domain, tau2_task, messages, termination, nl_judge, nl_judge_args) -> Tau2Score:
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    if termination not in STOPS:
        return Tau2Score(0.0, False, info={"note": f"episode ended by {termination}, not a stop"})
    criteria = tau2_task.evaluation_criteria
    if criteria is None:
        return Tau2Score(1.0, True, info={"note": "no evaluation criteria"})
    basis = set(criteria.reward_basis)
    env = EnvironmentEvaluator.calculate_reward(environment_constructor=domain.new_env, task=tau2_task,
                                                full_trajectory=messages, solo_mode=False)
    parts = {"env": env,
             "action": ActionEvaluator.calculate_reward(task=tau2_task, full_trajectory=messages),
             "communicate": CommunicateEvaluator.calculate_reward(task=tau2_task, full_trajectory=messages)}
    info: dict[str, Any] = {}
    if RewardType.NL_ASSERTION in basis:
        if nl_judge:
            parts["nl"] = _nl_with_judge(tau2_task, messages, nl_judge, nl_judge_args or {})
        else:
            basis.discard(RewardType.NL_ASSERTION)
            info["nl_assertions"] = "skipped: no judge endpoint configured"
    groups = [("env", {RewardType.DB, RewardType.ENV_ASSERTION}), ("action", {RewardType.ACTION}),
              ("nl", {RewardType.NL_ASSERTION}), ("communicate", {RewardType.COMMUNICATE})]
    reward, breakdown = 1.0, {}
    for name, kinds in groups:
        if basis & kinds and name in parts:
            part = parts[name]
            breakdown.update({str(getattr(k, "value", k)): float(v) for k, v in (part.reward_breakdown or {}).items()})
            reward *= part.reward
    if env.db_check is not None:
        info["db_match"] = bool(env.db_check.db_match)
    info["reward_basis"] = sorted(str(getattr(b, "value", b)) for b in criteria.reward_basis)
    return Tau2Score(float(reward), reward == 1.0, breakdown, info)


def _nl_with_judge(tau2_task: Any, messages: list[Any], model: str, args: dict[str, Any]) -> Any:
    """NL assertions with our judge endpoint: tau2's evaluator reads its model from module constants
    (at call time), so they are swapped for the call. Imports litellm (~3 s)."""
    import tau2.evaluator.evaluator_nl_assertions as nl

    saved = nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS
    nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS = model, {"temperature": 0.0, **args}
    try:
        return nl.NLAssertionsEvaluator.calculate_reward(task=tau2_task, full_trajectory=messages)
    finally:
        nl.DEFAULT_LLM_NL_ASSERTIONS, nl.DEFAULT_LLM_NL_ASSERTIONS_ARGS = saved


def score_session(session: Any, termination: str, **judge: Any) -> Tau2Score:
    """Score an tools/tau2/adapter.Tau2Session."""
    return evaluate_messages(session.domain, session.tau2_task, session.messages, termination, **judge)


def judgement_of(traj: Any) -> Any:
    """The τ² verdict as an orchestra.types.Judgement, for reward/score.py's judging step on data_source
    `tau2/*` (the episode driver already scored it; a τ² task has no gold answer string to judge)."""
    from orchestra.types import Judgement

    score = (getattr(traj, "meta", None) or {}).get("tau2_score")
    if not score:
        return Judgement(False, 0.0, "tau2", "episode was not scored by the τ² evaluator")
    reason = score.get("error") or ", ".join(f"{k}={v:g}" for k, v in sorted(score.get("breakdown", {}).items()))
    return Judgement(bool(score["correct"]), float(score["score"]), "tau2", reason or str(score.get("info", "")))
