"""Rollout worker: holds one engine and runs many episodes at once through the shared agent loop.

A plain class; cluster/train.py makes it a Ray actor (resources from config) with a readable name.
Episodes run concurrently as asyncio tasks, so the HF engine batches their generate calls while tool calls
(tool-server actors, or in-process tools) are in flight. Each finished trajectory is handed to the reward
actor at once (streaming: a group is scored as soon as its last member arrives, wherever it ran), and the
worker returns the scored results. Weights arrive versioned from the learner through the object store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from orchestra.agent_loop import AgentLoop
from orchestra.engine import Sampling
from orchestra.prompt import Prompter
from orchestra.types import Task, Trajectory

log = logging.getLogger(__name__)


def build_engine(model: Any, tokenizer: Any, kind: str, engine_kwargs: dict[str, Any]) -> Any:
    """`hf`, `vllm`, or `package.module:factory` — a callable (model, tokenizer, **engine_kwargs) -> Engine,
    e.g. a scripted engine for benchmarks that measure tool overlap rather than generation speed."""
    if ":" in kind:
        import importlib

        module, _, attr = kind.partition(":")
        return getattr(importlib.import_module(module), attr)(model, tokenizer, **engine_kwargs)
    if kind == "vllm":
        from orchestra.vllm_engine import VLLMEngine

        return VLLMEngine.from_model(model, tokenizer, **engine_kwargs)
    from orchestra.engine import HFEngine

    return HFEngine.from_model(model, tokenizer, **engine_kwargs)


class RolloutWorker:
    def __init__(self, *, worker_id: int, model_name: str, model_kwargs: dict[str, Any], engine_kind: str,
                 engine_kwargs: dict[str, Any], agent_kwargs: dict[str, Any], prompter_kwargs: dict[str, Any],
                 tool_handles: dict[str, Any] | None = None, zoo: dict[str, Any] | None = None,
                 corpus_path: str = "", tool_timeout_s: float = 60.0, reward_actor: Any = None):
        from orchestra.models import eos_token_ids, load_policy

        self.worker_id = worker_id
        model, self.tokenizer = load_policy(model_name, **model_kwargs)
        self.engine = build_engine(model, self.tokenizer, engine_kind, engine_kwargs)
        if tool_handles:
            from actors.tool_server import RayToolClient

            tools = RayToolClient(tool_handles, timeout_s=tool_timeout_s)
        else:
            tools = _local_tools(zoo or {}, corpus_path)
        self.loop = AgentLoop(self.engine, tools, Prompter(self.tokenizer, **prompter_kwargs),
                              eos_token_ids=eos_token_ids(self.tokenizer), **agent_kwargs)
        self.reward_actor = reward_actor
        self.version = 0

    def ready(self) -> int:
        return self.worker_id

    def load_weights(self, version: int, state_dict: dict[str, Any]) -> int:
        """Swap in the learner's weights (the engine waits for its running batch)."""
        self.engine.load_weights(state_dict, version)
        self.version = version
        return version

    def load_weights_packed(self, weights: tuple[int, dict[str, Any]]) -> int:
        """The learner's `get_weights()` result as one object-store object, shared by every worker."""
        return self.load_weights(*weights)

    async def rollout(self, requests: list[dict[str, Any]], sampling: dict[str, Any],
                      score: bool = True) -> list[dict[str, Any]]:
        """Run episodes; each request is {task, uid, group_size}. With `score`, each trajectory goes to the
        reward actor as soon as it finishes and the result carries its score; else only the trajectory."""
        samp = Sampling(**sampling)

        async def one(req: dict[str, Any]) -> dict[str, Any]:
            task = Task.from_dict(req["task"])
            try:
                await self._warm_schemas(task)
                traj = await self.loop.run(task, samp, uid=req["uid"], policy_version=self.version)
            except Exception as e:  # never lose a group member: an error trajectory still reaches the reward
                traj = Trajectory(task_id=task.id, uid=req["uid"], termination="error",
                                  error=f"rollout failed: {type(e).__name__}: {e}")
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
        from orchestra.tasks import load_corpus

        kwargs["corpus"] = load_corpus(corpus_path)
    return LocalToolClient(build_tools(cfg, **kwargs))


def trajectory(result: dict[str, Any]) -> Trajectory:
    return Trajectory.from_dict(result["traj"])
