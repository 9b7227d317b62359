"""Rollout worker: holds one engine and runs many episodes at once through the shared agent loop.

A plain class; cluster/launch.py makes it a Ray actor (resources from config) with a readable name.
Episodes run concurrently as asyncio tasks, so the HF engine batches their generate calls while tool calls
(tool-server actors, or in-process tools) are in flight. Each finished trajectory is handed to the reward
actor at once (streaming: a group is scored as soon as its last member arrives, wherever it ran), and the
worker returns one typed `EpisodeResult` per episode (the trajectory and its score; they pickle as they are). Weights arrive versioned from the learner through the object store.

Tasks whose data source an integration registered (orchestra/data/sources.py; τ²-bench's `tau2/*`, wired in
tools/tau2/wiring.py) run through that integration's episode runner instead of the agent loop, with the
same engine, prompter and weights; the runner is built on first use from the config sections it reads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from actors import metrics
from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.data.sources import RunnerParts, episode_kind
from orchestra.engine import Sampling
from orchestra.types import Task, Trajectory
from reward.score import Scored
from tools.tau2 import wiring as _tau2_wiring  # noqa: F401  registers τ²

log = logging.getLogger(__name__)


@dataclass
class EpisodeResult:
    """One played episode as it comes back from a rollout worker: its trajectory, task and group, and its score
    from the reward actor (None when the rollout was not scored, e.g. held-out evaluation)."""

    traj: Trajectory
    task_id: str
    uid: str
    scored: Scored | None = None


def build_engine(model: Any, tokenizer: Any, kind: str, engine_kwargs: dict[str, Any]) -> Any:
    """`hf`, `remote` (a vLLM server; `engine_kwargs` = EngineConfig.remote_kwargs(), `model` unused), or
    `package.module:factory` — a callable (model, tokenizer, **engine_kwargs) -> Engine, e.g. a scripted engine
    for benchmarks that measure tool overlap rather than generation speed."""
    if ":" in kind:
        import importlib

        module, _, attr = kind.partition(":")
        return getattr(importlib.import_module(module), attr)(model, tokenizer, **engine_kwargs)
    if kind == "vllm":  # cluster/launch.py refuses it before any actor starts
        raise ValueError("rollout workers run engine.kind=hf, remote (a vLLM server) or a factory; in-process "
                         "vLLM rollouts go through backend=verl")
    if kind == "remote":
        from orchestra.engine.remote import RemoteEngine

        return RemoteEngine(**engine_kwargs)
    from orchestra.engine.hf import HFEngine

    return HFEngine.from_model(model, tokenizer, **engine_kwargs)


def named_actor(actor: Any) -> Any:
    """A handle for an actor given by its name (in this job's namespace); a handle or None as it is."""
    if isinstance(actor, str):
        import ray

        return ray.get_actor(actor)
    return actor


class RolloutWorker:
    def __init__(self, *, worker_id: int, model_name: str, model_kwargs: dict[str, Any], engine_kind: str,
                 engine_kwargs: dict[str, Any], agent_kwargs: dict[str, Any], prompter_kwargs: dict[str, Any],
                 tool_handles: dict[str, Any] | None = None, zoo: dict[str, Any] | None = None,  # or actor names
                 corpus_path: str = "", tool_timeout_s: float = 60.0, tool_max_in_flight: int = 0,
                 tool_replay: int = 0, reward_actor: Any = None, torch_threads: int = 0,
                 tau2: dict[str, Any] | None = None):
        from orchestra.engine import eos_token_ids
        from orchestra.policy.models import load_policy, set_torch_threads

        set_torch_threads(torch_threads)
        self.worker_id = worker_id
        if engine_kind == "remote":  # the server holds the weights; only the tokenizer is needed here
            from orchestra.policy.models import load_tokenizer

            model, self.tokenizer = None, load_tokenizer(model_name, **{
                k: model_kwargs[k] for k in ("tiny", "cache_dir", "chat_template") if k in model_kwargs})
        else:
            model, self.tokenizer = load_policy(model_name, **model_kwargs)
        self.engine = build_engine(model, self.tokenizer, engine_kind, engine_kwargs)
        # named actors are looked up here, in this process: a handle passed in would make Ray keep this actor's
        # constructor arguments in the object store, which a restart (e.g. on another node) may not find again
        tool_handles = {k: named_actor(v) for k, v in (tool_handles or {}).items()}
        reward_actor = named_actor(reward_actor)
        if tool_handles:
            from actors.tool_client import RayToolClient

            tools = RayToolClient(tool_handles, timeout_s=tool_timeout_s, max_in_flight=tool_max_in_flight)
        else:
            tools = _local_tools(zoo or {}, corpus_path)
        if tool_replay > 0:  # zoo.server.client_replay: the same call in the same context is made once
            from orchestra.agent.call_cache import CallCache

            tools = CallCache(tools, max_kept=tool_replay)
        self.loop = AgentLoop(self.engine, tools, Prompter(self.tokenizer, **prompter_kwargs),
                              eos_token_ids=eos_token_ids(self.tokenizer), **agent_kwargs)
        self._agent_loop = AgentLoopRunner(self.loop)
        self.reward_actor = reward_actor
        self.version = 0
        self._merger: Any = None  # LoRA payloads -> merged weights (built at the first sync)
        self.sections = {"zoo": dict(zoo or {}), "tau2": dict(tau2 or {})}  # what episode runners may read
        self.agent_kwargs = dict(agent_kwargs)
        self._runners: dict[str, Any] = {}  # data_source prefix -> its integration's episode runner

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
                      score: bool = True) -> list[EpisodeResult]:
        """Run episodes; each request is {task, uid, group_size} and optionally `seed` (the episode samples from
        its own stream, so it can be replayed: cluster/replay.py) and `episode_id`. With `score`, each trajectory
        goes to the reward actor as soon as it finishes and the result carries its score; else only the
        trajectory."""
        samp = Sampling(**sampling)

        async def one(req: dict[str, Any]) -> EpisodeResult:
            task = Task.from_dict(req["task"])
            s = samp if req.get("seed") is None else dataclasses.replace(samp, seed=int(req["seed"]))
            eid = str(req.get("episode_id", ""))
            try:
                traj = await self._runner(task).run(task, s, uid=req["uid"], episode_id=eid,
                                                    policy_version=self.version)
            except Exception as e:  # never lose a group member: an error trajectory still reaches the reward
                traj = Trajectory(task_id=task.id, uid=req["uid"], termination="error", episode_id=eid,
                                  error=f"rollout failed: {type(e).__name__}: {e}")
            metrics.record("episodes_total", preset=metrics.preset_of(task.pref),
                           termination=traj.termination)
            out = EpisodeResult(traj, task.id, req["uid"])
            if score and self.reward_actor is not None:
                out.scored = Scored(**await self.reward_actor.submit.remote(traj.to_dict(), req["task"],
                                                                            req["group_size"]))
            return out

        return list(await asyncio.gather(*(one(r) for r in requests)))

    def _runner(self, task: Task) -> Any:
        """The episode runner of the task's data source: this worker's agent loop, or the runner an integration
        registered for it (built on first use, shared by concurrent episodes)."""
        found = episode_kind(task.data_source)
        if found is None:
            return self._agent_loop
        prefix, kind = found
        if prefix not in self._runners:
            from orchestra.engine import eos_token_ids

            parts = RunnerParts(self.engine, self.loop.prompter, eos_token_ids(self.tokenizer), self.agent_kwargs,
                                self.sections)
            self._runners[prefix] = kind.runner(parts)
        return self._runners[prefix]

    def stats(self) -> dict[str, Any]:
        get = getattr(self.engine, "stats", None)
        tools = self.loop.tools
        replays = {"tool_calls_asked": tools.calls, "tool_calls_made": tools.made} if hasattr(tools, "made") else {}
        return {"worker_id": self.worker_id, "version": self.version, **(get() if callable(get) else {}), **replays}


class AgentLoopRunner:
    """The default episode runner: the worker's agent loop, with the task's tool schemas fetched first without
    blocking the event loop (a tool server that is restarting gets a few tries with backoff; the agent loop
    turns a final failure into an error trajectory)."""

    def __init__(self, loop: AgentLoop):
        self.loop = loop

    async def run(self, task: Task, sampling: Sampling, uid: str = "", episode_id: str = "",
                  policy_version: int = 0) -> Trajectory:
        await self._warm_schemas(task)
        return await self.loop.run(task, sampling, uid=uid, episode_id=episode_id, policy_version=policy_version)

    async def _warm_schemas(self, task: Task, attempts: int = 5) -> None:
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


def trajectory(result: EpisodeResult) -> Trajectory:
    return result.traj
