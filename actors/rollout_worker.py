"""Rollout worker: holds one engine and runs many episodes at once through the shared agent loop.

A plain class; cluster/launch.py makes it a Ray actor (resources from config) with a readable name.
Episodes run concurrently as asyncio tasks, so the HF engine batches their generate calls while tool calls
(tool-server actors, or in-process tools) are in flight. Each finished trajectory is handed to the reward
actor at once (streaming: a group is scored as soon as its last member arrives, wherever it ran), and the
worker returns the scored results. Weights arrive versioned from the learner through the object store.

τ²-bench tasks (data_source `tau2/*`) run through orchestra.tau2.episode.Tau2EpisodeDriver instead of the
agent loop (a three-party conversation with a simulated user), with the same engine, prompter and weights.
The driver is built lazily, once per domain, from the `tau2` settings (orchestra.config.Tau2Config as a
dict): its domain tools and call_expert run in this process (each episode owns its environment, which the
official evaluator scores here), and the user simulator is an in-process UserSimulatorPool.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

from actors import metrics
from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.engine import Sampling
from orchestra.types import Task, Trajectory

log = logging.getLogger(__name__)


def build_engine(model: Any, tokenizer: Any, kind: str, engine_kwargs: dict[str, Any]) -> Any:
    """`hf`, or `package.module:factory` — a callable (model, tokenizer, **engine_kwargs) -> Engine, e.g. a
    scripted engine for benchmarks that measure tool overlap rather than generation speed."""
    if ":" in kind:
        import importlib

        module, _, attr = kind.partition(":")
        return getattr(importlib.import_module(module), attr)(model, tokenizer, **engine_kwargs)
    if kind == "vllm":  # cluster/launch.py refuses it before any actor starts
        raise ValueError("rollout workers run engine.kind=hf (or a factory); vLLM rollouts go through backend=verl")
    from orchestra.engine.hf import HFEngine

    return HFEngine.from_model(model, tokenizer, **engine_kwargs)


class RolloutWorker:
    def __init__(self, *, worker_id: int, model_name: str, model_kwargs: dict[str, Any], engine_kind: str,
                 engine_kwargs: dict[str, Any], agent_kwargs: dict[str, Any], prompter_kwargs: dict[str, Any],
                 tool_handles: dict[str, Any] | None = None, zoo: dict[str, Any] | None = None,
                 corpus_path: str = "", tool_timeout_s: float = 60.0, tool_max_in_flight: int = 0,
                 reward_actor: Any = None, torch_threads: int = 0, tau2: dict[str, Any] | None = None):
        from orchestra.policy.models import load_policy, set_torch_threads
        from orchestra.policy.tokenizer import eos_token_ids

        set_torch_threads(torch_threads)
        self.worker_id = worker_id
        model, self.tokenizer = load_policy(model_name, **model_kwargs)
        self.engine = build_engine(model, self.tokenizer, engine_kind, engine_kwargs)
        if tool_handles:
            from actors.tool_server import RayToolClient

            tools = RayToolClient(tool_handles, timeout_s=tool_timeout_s, max_in_flight=tool_max_in_flight)
        else:
            tools = _local_tools(zoo or {}, corpus_path)
        self.loop = AgentLoop(self.engine, tools, Prompter(self.tokenizer, **prompter_kwargs),
                              eos_token_ids=eos_token_ids(self.tokenizer), **agent_kwargs)
        self.reward_actor = reward_actor
        self.version = 0
        self._merger: Any = None  # LoRA payloads -> merged weights (built at the first sync)
        self.tau2, self.zoo, self.agent_kwargs = dict(tau2 or {}), zoo or {}, dict(agent_kwargs)
        self._tau2_drivers: dict[str, Any] = {}

    def ready(self) -> int:
        return self.worker_id

    def ready_version(self) -> int:
        """The policy version this worker generates with (0 = its initial weights, e.g. after a restart)."""
        return self.version

    def load_weights(self, version: int, state_dict: dict[str, Any]) -> int:
        """Swap in the learner's weights (the engine waits for its running batch): a full state dict, or a
        LoRA adapter payload (orchestra/policy/lora.py) merged here into the weights of the last full load."""
        from orchestra.policy.lora import LORA_KEY, AdapterMerger

        if self._merger is None:
            self._merger = AdapterMerger()
        base = {k: v for k, v in state_dict.items() if k != LORA_KEY}
        if base:  # full weights (a LoRA learner's are its base, with the adapter beside them)
            self.engine.load_weights(base, version)
            self._merger.full_loaded()
        if LORA_KEY in state_dict:
            model = getattr(self.engine, "model", None)
            if model is None:
                raise TypeError(f"{type(self.engine).__name__} exposes no model to merge a LoRA adapter into; "
                                "use the hf engine with model.lora")
            self.engine.load_weights(self._merger.merge(model, state_dict), version, partial=True)
        self.version = version
        metrics.record("policy_version", version, worker=self.worker_id)
        return version

    def load_weights_packed(self, weights: tuple[int, dict[str, Any]]) -> int:
        """The learner's `get_weights()` result as one object-store object, shared by every worker."""
        return self.load_weights(*weights)

    async def rollout(self, requests: list[dict[str, Any]], sampling: dict[str, Any],
                      score: bool = True) -> list[dict[str, Any]]:
        """Run episodes; each request is {task, uid, group_size} and optionally `seed` (the episode samples from
        its own stream, so it can be replayed: cluster/replay.py) and `episode_id`. With `score`, each trajectory
        goes to the reward actor as soon as it finishes and the result carries its score; else only the
        trajectory."""
        samp = Sampling(**sampling)

        async def one(req: dict[str, Any]) -> dict[str, Any]:
            task = Task.from_dict(req["task"])
            s = samp if req.get("seed") is None else dataclasses.replace(samp, seed=int(req["seed"]))
            eid = str(req.get("episode_id", ""))
            try:
                if task.data_source.startswith("tau2/"):
                    traj = await self._tau2_driver(task).run(task, s, uid=req["uid"], policy_version=self.version)
                else:
                    await self._warm_schemas(task)
                    traj = await self.loop.run(task, s, uid=req["uid"], episode_id=eid, policy_version=self.version)
            except Exception as e:  # never lose a group member: an error trajectory still reaches the reward
                traj = Trajectory(task_id=task.id, uid=req["uid"], termination="error", episode_id=eid,
                                  error=f"rollout failed: {type(e).__name__}: {e}")
            metrics.record("episodes_total", preset=metrics.preset_of(task.pref),
                           termination=traj.termination)
            out: dict[str, Any] = {"traj": traj.to_dict(), "task_id": task.id, "uid": req["uid"]}
            if score and self.reward_actor is not None:
                out["scored"] = await self.reward_actor.submit.remote(out["traj"], req["task"], req["group_size"])
            return out

        return list(await asyncio.gather(*(one(r) for r in requests)))

    async def _warm_schemas(self, task: Task, attempts: int = 5) -> None:
        """Fetch tool schemas without blocking the event loop; a tool server that is restarting gets a few
        tries with backoff (the agent loop turns a final failure into an error trajectory)."""
        warm = getattr(self.loop.tools, "aschemas", None)
        if warm is None:
            return
        for i in range(attempts):
            try:
                await warm(task)
                return
            except Exception:
                if i == attempts - 1:
                    raise
                await asyncio.sleep(0.5 * 2**i)

    def _tau2_driver(self, task: Task) -> Any:
        """The τ² episode driver of the task's domain (built on first use; shared by concurrent episodes,
        which are kept apart by episode id)."""
        from orchestra.policy.tokenizer import eos_token_ids

        domain = str(task.meta.get("tau2_domain") or task.data_source.split("/", 1)[1])
        driver = self._tau2_drivers.get(domain)
        if driver is None:
            driver = self._tau2_drivers[domain] = build_tau2_driver(
                domain, self.engine, self.loop.prompter, self.tau2, self.zoo, self.agent_kwargs,
                eos_token_ids(self.tokenizer), user=tau2_user(self.tau2))
        return driver

    def stats(self) -> dict[str, Any]:
        get = getattr(self.engine, "stats", None)
        return {"worker_id": self.worker_id, "version": self.version, **(get() if callable(get) else {})}


def _local_tools(zoo: dict[str, Any], corpus_path: str) -> Any:
    """In-process tools (no tool-server actors): tests, evaluation and single-process runs."""
    from omegaconf import OmegaConf

    from orchestra.config import ZooConfig
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ZooConfig), zoo))
    kwargs: dict[str, Any] = {}
    if corpus_path:
        from orchestra.data.tasks import load_corpus

        kwargs["corpus"] = load_corpus(corpus_path)
    return LocalToolClient(build_tools(cfg, **kwargs))


def tau2_user(tau2: dict[str, Any]) -> Any:
    """An in-process τ² user simulator from Tau2Config's keys (its API key is read from the named env var)."""
    from orchestra.tau2.user import UserSimulatorPool

    if not tau2.get("user_model"):
        raise ValueError("τ² tasks need a user simulator: set tau2.user_model (e.g. openai/<name>) and "
                         "tau2.user_api_base")
    return UserSimulatorPool(tau2["user_model"], api_base=tau2.get("user_api_base", ""),
                             api_key_env=tau2.get("user_api_key_env", ""),
                             temperature=float(tau2.get("user_temperature", 0.0)),
                             timeout_s=float(tau2.get("user_timeout_s", 60.0)),
                             num_retries=int(tau2.get("user_num_retries", 2)))


def tau2_judge(tau2: dict[str, Any]) -> dict[str, Any]:
    """Tau2EpisodeDriver's nl_judge / nl_judge_args (none configured: NL assertions are skipped, and say so)."""
    import os

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


def tau2_driver_kwargs(tau2: dict[str, Any], agent_kwargs: dict[str, Any], eos: Any) -> dict[str, Any]:
    """Tau2EpisodeDriver's limits from the agent section (turns, context, budget) and the tau2 section."""
    a = agent_kwargs
    return {"max_turns": int(a.get("max_turns", 30)), "max_errors": int(tau2.get("max_errors", 10)),
            "max_calls_per_turn": int(a.get("max_calls_per_turn", 1)),
            "max_context_tokens": int(a.get("max_context_tokens", 16384)), "budget_usd": a.get("budget_usd"),
            "budget_seconds": a.get("budget_seconds"), "eos_token_ids": list(eos or []), **tau2_judge(tau2)}


def tau2_experts(tau2: dict[str, Any], zoo: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(experts for call_expert, its `expert-*` tiers -> expert) from the zoo; (None, {}) keeps
    transfer_to_human_agents."""
    if not tau2.get("call_expert", True) or not zoo.get("experts"):
        return None, {}
    from omegaconf import OmegaConf

    from orchestra.config import ZooConfig
    from tools.registry import build_experts

    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ZooConfig), zoo))
    from orchestra.tau2.call_expert import PREFIX

    return build_experts(cfg), {t: e for t, e in cfg.tiers.items() if t.startswith(PREFIX)}


def build_tau2_driver(domain: str, engine: Any, prompter: Any, tau2: dict[str, Any], zoo: dict[str, Any],
                      agent_kwargs: dict[str, Any], eos: Any, user: Any) -> Any:
    """A Tau2EpisodeDriver for `domain`: in-process domain tools (+ call_expert over the zoo), one session
    store, the given user simulator."""
    from orchestra.tau2.adapter import Tau2Sessions, build_tools
    from orchestra.tau2.domain import get_domain
    from orchestra.tau2.episode import Tau2EpisodeDriver
    from tools.base import LocalToolClient

    sessions = Tau2Sessions(get_domain(domain))
    experts, tiers = tau2_experts(tau2, zoo)
    tools = build_tools(sessions.domain, sessions, experts=experts, tiers=tiers,
                        expert_max_tokens=int(tau2.get("expert_max_tokens", 1024)))
    return Tau2EpisodeDriver(engine, LocalToolClient(tools), prompter, sessions, user,
                             **tau2_driver_kwargs(tau2, agent_kwargs, eos))


def trajectory(result: dict[str, Any]) -> Trajectory:
    return Trajectory.from_dict(result["traj"])
