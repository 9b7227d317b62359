"""The τ² user simulator as a Ray actor, and the episode driver's user client over it.

The actor's body is tools.tau2.user.UserSimulatorPool (plain async class: one tau2 UserSimulator per
episode id, LLM through any OpenAI-compatible endpoint); `make_user_simulator` applies the resources the
caller (cluster/) chooses. Being async, one actor serves many concurrent episodes; each litellm call runs in
a worker thread of the actor. `RayUserClient` gives tools/tau2/episode.py the same open / reply / close
coroutines as the in-process pool; a dead or timed-out actor is returned as a reply with `error` set (the
episode ends as user_error), never raised into the episode.
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from tools.tau2.user import UserSimulatorPool


def make_user_simulator(*, num_cpus: float = 0.1, max_concurrency: int = 64, max_restarts: int = 3,
                        name: str | None = None, **pool_kwargs: Any) -> Any:
    """Start one user-simulator actor. `pool_kwargs` are UserSimulatorPool's (model, api_base, ...)."""
    options: dict[str, Any] = {"num_cpus": num_cpus, "max_concurrency": max_concurrency,
                               "max_restarts": max_restarts}
    if name:
        options["name"] = name
    # the price-map switch must reach the actor's process before litellm is imported there
    options["runtime_env"] = {"env_vars": {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}}
    return ray.remote(UserSimulatorPool).options(**options).remote(**pool_kwargs)


class RayUserClient:
    """open / reply / close over a user-simulator actor, with a per-reply timeout."""

    def __init__(self, actor: Any, timeout_s: float = 120.0):
        self.actor, self.timeout_s = actor, timeout_s

    async def open(self, episode_id: str, tau2_task_json: dict[str, Any]) -> None:
        await asyncio.wait_for(self.actor.open.remote(episode_id, tau2_task_json), self.timeout_s)

    async def reply(self, episode_id: str, agent_text: str) -> dict[str, Any]:
        try:
            return await asyncio.wait_for(self.actor.reply.remote(episode_id, agent_text), self.timeout_s)
        except Exception as e:  # actor died, timed out: the episode ends as user_error
            return {"text": "", "stop": None, "error": f"user simulator actor failed: {type(e).__name__}: {e}"}

    async def close(self, episode_id: str) -> None:
        try:
            await asyncio.wait_for(self.actor.close.remote(episode_id), self.timeout_s)
        except Exception:  # closing is best effort: the actor may already be gone
            pass
