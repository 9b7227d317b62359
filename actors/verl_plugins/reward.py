"""The `scalar` rubric as verl 0.9.1's custom reward function (`reward.custom_reward_function.{path,name}`).

verl's naive reward manager (experimental/reward_loop/reward_manager/naive.py) calls
`compute_score(data_source=, solution_str=, ground_truth=, extra_info=, **reward_kwargs)` once per episode on its
final output; `extra_info` is the dataset row's extra_info merged with the rollout's `extra_fields` (our agent
loop puts the final answer, the accounted $ and seconds, tool counts and the termination there: see
actors/verl_plugins/agent_loop.episode_extra). It is async (verl awaits coroutine functions), because judges may call
an LLM. The returned dict's "score" is the reward; its other keys are logged by verl as reward_extra_info, so
they are a fixed set of floats (every episode must report the same keys).

The numbers are the local backend's: the same judge choice and gold aliases as reward/score.py, the same
`reward.rubric.scalar_reward`, and an errored episode gets `failure_reward` without being judged.
`reward_kwargs` carries `orchestra_overrides` (our config: judges, scales, failure reward) — set by
cluster/verl/job.py. The `toolorchestra` group rubric does not come through here (the agent loop awaits the
RewardActor instead).
"""

from __future__ import annotations

import functools
from typing import Any

KEYS = ("score", "acc", "cost_usd", "latency_s", "term_accuracy", "term_cost", "term_latency", "term_tools",
        "failed")


@functools.lru_cache(maxsize=8)
def _reward_settings(overrides: tuple[str, ...]) -> dict[str, Any]:
    from orchestra.config import load_config

    r = load_config(list(overrides)).reward
    return {"judges": dict(r.judges), "cost_scale": r.cost_scale, "latency_scale": r.latency_scale,
            "failure_reward": r.failure_reward, "unanswered_penalty": r.unanswered_penalty}


def _answer(solution_str: str, info: dict[str, Any]) -> str | None:
    if "answer" in info:  # our agent loop's answer (the `answer` tool's or the text answer); "" = none given
        return str(info["answer"]) or None
    from orchestra.agent.parse import (
        parse,  # rows produced elsewhere: read the answer from the decoded response
    )

    return parse(solution_str or "", "text").answer


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                        orchestra_overrides: Any = (), **_: Any) -> dict[str, float]:
    from orchestra.data.tasks import task_from_verl_row
    from reward.judges import judge, judge_for
    from reward.rubric import scalar_reward

    s = _reward_settings(tuple(str(o) for o in orchestra_overrides))
    info = dict(extra_info or {})
    out = dict.fromkeys(KEYS, 0.0)
    out["cost_usd"], out["latency_s"] = float(info.get("cost_usd", 0.0)), float(info.get("latency_s", 0.0))
    if info.get("termination") == "error":
        out["score"] = out["term_accuracy"] = float(s["failure_reward"])
        out["failed"] = 1.0
        return out
    try:
        task = task_from_verl_row({"extra_info": info})
        gold = [task.answer] + [str(a) for a in task.meta.get("answer_aliases", [])]
        question, pref = task.problem, task.pref
    except (ValueError, TypeError):  # a row without our task: judge against verl's ground truth
        gold, question, pref = [str(ground_truth)], "", dict(info.get("pref") or {"accuracy": 1.0})
    verdict = await judge(judge_for(data_source, s["judges"]), _answer(solution_str, info), gold, question)
    r = scalar_reward(verdict.correct, out["cost_usd"], out["latency_s"], dict(info.get("tool_counts") or {}),
                      pref, s["cost_scale"], s["latency_scale"],
                      answered=info.get("termination", "answered") == "answered",
                      unanswered_penalty=s["unanswered_penalty"])
    out.update(score=float(r.value), acc=float(verdict.correct), term_accuracy=r.terms.get("accuracy", 0.0),
               term_cost=r.terms.get("cost", 0.0), term_latency=r.terms.get("latency", 0.0),
               term_tools=sum(v for k, v in r.terms.items() if k.startswith("tool:")))
    return out
