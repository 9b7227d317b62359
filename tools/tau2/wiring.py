"""τ²-bench wired into training and evaluation, in one place.

Importing this module registers τ² with the core's registries (orchestra/data/sources.py):
- the task source `tau2:<domain>[:<version>[:<tasks.json>]]` (`data.source`; <domain> is a shipped name or a
  domain directory, tools/tau2/domain_files.py; `data.splits=train,test` takes the domain's own split; the
  domain DB is the corpus, so there is none for the retriever);
- the episode kind of data_source `tau2/*`: episodes are played by the three-party driver
  (tools/tau2/episode.py) and judged by the official evaluator's verdict on the trajectory
  (tools/tau2/reward.judgement_of; a τ² task has no gold answer string).
The driver's parts come from the `tau2` config section (Tau2Config as a dict) and the zoo: domain tools and
call_expert run in the rollout worker's process (each episode owns its environment, which the evaluator
scores there), the user simulator is an in-process UserSimulatorPool. cluster/tau2_eval.py's `dataset=tau2:*`
builds its drivers from the same helpers (`user_simulator`, `driver_limits`, `call_experts`).
Processes that may meet τ² tasks (rollout workers, the reward actor, the training and verl drivers) import it.
"""

from __future__ import annotations

import os
from typing import Any

from orchestra.data.sources import EpisodeKind, RunnerParts, register_episode_kind, register_task_source
from orchestra.types import Task, Trajectory
from tools.tau2.reward import judgement_of


def load_source(spec: str, data_cfg: Any, tiers: dict[str, str] | None) -> tuple[list[Task], list[Task] | None, list]:
    """A task source: `tau2:<domain or domain dir>[:<version>[:<path>]]` -> the domain's tasks, split by the
    caller (seeded), or with `data.splits=train,test` by the domain's own split file, each cut to its n."""
    from tools.tau2.domain import domain_tasks
    from tools.tau2.evaluation import parse_dataset

    kw = parse_dataset(spec)
    splits = [s.strip() for s in str(getattr(data_cfg, "splits", "") or "").split(",") if s.strip()]
    if not splits:
        return domain_tasks(**kw), None, []
    mapping = dict(tiers or {})
    return (domain_tasks(**kw, split=splits[0], limit=data_cfg.n_train, model_mapping=mapping),
            domain_tasks(**kw, split=splits[1], limit=data_cfg.n_heldout, model_mapping=mapping), [])


def user_simulator(tau2: dict[str, Any]) -> Any:
    """An in-process τ² user simulator from Tau2Config's keys (its API key is read from the named env var)."""
    from tools.tau2.user import UserSimulatorPool

    if not tau2.get("user_model"):
        raise ValueError("τ² tasks need a user simulator: set tau2.user_model (e.g. openai/<name>) and "
                         "tau2.user_api_base")
    return UserSimulatorPool(tau2["user_model"], api_base=tau2.get("user_api_base", ""),
                             api_key_env=tau2.get("user_api_key_env", ""),
                             temperature=float(tau2.get("user_temperature", 0.0)),
                             timeout_s=float(tau2.get("user_timeout_s", 60.0)),
                             num_retries=int(tau2.get("user_num_retries", 2)))


def nl_judge(tau2: dict[str, Any]) -> dict[str, Any]:
    """Tau2EpisodeDriver's nl_judge / nl_judge_args (none configured: NL assertions are skipped, and say so)."""
    model = tau2.get("nl_judge_model") or None
    args: dict[str, Any] = {}
    if model and tau2.get("nl_judge_base"):
        args["api_base"] = tau2["nl_judge_base"]
    if model and tau2.get("nl_judge_key_env"):
        key = os.environ.get(tau2["nl_judge_key_env"])
        if not key:
            raise ValueError(f"τ² NL judge: environment variable {tau2['nl_judge_key_env']} is not set")
        args["api_key"] = key
    return {"nl_judge": model, "nl_judge_args": args or None}


def driver_limits(tau2: dict[str, Any], agent_kwargs: dict[str, Any], eos: Any) -> dict[str, Any]:
    """Tau2EpisodeDriver's limits from the agent section (turns, context, budget) and the tau2 section."""
    a = agent_kwargs
    return {"max_turns": int(a.get("max_turns", 30)), "max_errors": int(tau2.get("max_errors", 10)),
            "max_calls_per_turn": int(a.get("max_calls_per_turn", 1)),
            "max_context_tokens": int(a.get("max_context_tokens", 16384)), "budget_usd": a.get("budget_usd"),
            "budget_seconds": a.get("budget_seconds"), "eos_token_ids": list(eos or []), **nl_judge(tau2)}


def call_experts(tau2: dict[str, Any], zoo: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(experts for call_expert, its `expert-*` tiers -> expert) from the zoo; (None, {}) keeps
    transfer_to_human_agents."""
    if not tau2.get("call_expert", True) or not zoo.get("experts"):
        return None, {}
    from tools.registry import as_zoo, build_experts
    from tools.tau2.call_expert import TIER_PREFIX

    cfg = as_zoo(zoo)
    return build_experts(cfg), {t: e for t, e in cfg.tiers.items() if t.startswith(TIER_PREFIX)}


class Tau2Runner:
    """The episode runner of τ² tasks in a rollout worker: one driver per domain (built on first use, shared by
    concurrent episodes, which are kept apart by episode id) over the worker's engine and prompter."""

    def __init__(self, parts: RunnerParts):
        self.parts = parts
        self.tau2 = dict(parts.sections.get("tau2") or {})
        self.zoo = dict(parts.sections.get("zoo") or {})
        self.drivers: dict[str, Any] = {}

    def driver(self, task: Task) -> Any:
        from tools.tau2.episode import Tau2EpisodeDriver

        domain = str(task.meta.get("tau2_domain") or task.data_source.split("/", 1)[1])
        if domain not in self.drivers:
            p = self.parts
            experts, tiers = call_experts(self.tau2, self.zoo)
            self.drivers[domain] = Tau2EpisodeDriver.for_domain(
                domain, p.engine, p.prompter, user_simulator(self.tau2), experts=experts, tiers=tiers,
                expert_max_tokens=int(self.tau2.get("expert_max_tokens", 1024)),
                **driver_limits(self.tau2, p.agent_kwargs, p.eos_token_ids))
        return self.drivers[domain]

    async def run(self, task: Task, sampling: Any, uid: str = "", episode_id: str = "",
                  policy_version: int = 0) -> Trajectory:
        return await self.driver(task).run(task, sampling, uid=uid, episode_id=episode_id,
                                           policy_version=policy_version)


register_task_source("tau2:", load_source, named_splits=True)
register_episode_kind("tau2/", EpisodeKind(runner=Tau2Runner, judge=judgement_of))
