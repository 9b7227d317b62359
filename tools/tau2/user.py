"""The τ² user simulator, driven by any OpenAI-compatible endpoint, one conversation per episode.

`UserSimulatorPool` holds tau2's own `UserSimulator` (its guidelines, scenario prompt and role flipping)
per episode id; the LLM is reached through litellm as tau2 does, with `model="openai/<name>"` and
`api_base` pointing at any OpenAI-compatible server (vLLM, a provider, a fake in tests). The user's reply
ends the conversation when it holds `###STOP###`, `###TRANSFER###` or `###OUT-OF-SCOPE###` (tau2's stop
signals; `stop` in the returned dict names which). litellm calls are blocking, so they run in a thread.
The API key, when one is needed, is read from the environment variable named by `api_key_env`; it never
enters config or logs. Importing tau2's user simulator imports litellm (~3-4 s, more on a loaded machine).

actors/user_simulator.py makes this a Ray actor; tools/tau2/episode.py calls it (in-process or actor)
through the same three async methods: open, reply, close.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

STOP_SIGNALS = {"###STOP###": "stop", "###TRANSFER###": "transfer", "###OUT-OF-SCOPE###": "out_of_scope"}


def stop_kind(text: str | None) -> str | None:
    for token, kind in STOP_SIGNALS.items():
        if text and token in text:
            return kind
    return None


class UserSimulatorPool:
    """tau2 user simulators keyed by episode id (async methods; also the Ray actor's body)."""

    def __init__(self, model: str, api_base: str = "", api_key_env: str = "", temperature: float = 0.0,
                 timeout_s: float = 60.0, num_retries: int = 2, llm_args: dict[str, Any] | None = None):
        if not model:
            raise ValueError("the user simulator needs a model, e.g. 'openai/<name>' with api_base")
        self.model = model
        self.llm_args: dict[str, Any] = {"temperature": temperature, "timeout": timeout_s,
                                         "num_retries": num_retries, **(llm_args or {})}
        if api_base:
            self.llm_args["api_base"] = api_base
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"user simulator: environment variable {api_key_env} is not set")
            self.llm_args["api_key"] = key
        elif api_base:  # local OpenAI-compatible servers ignore the key, but the SDK wants one
            self.llm_args.setdefault("api_key", "none")
        self._live: dict[str, tuple[Any, Any]] = {}

    def _new_user(self, tau2_task: Any) -> tuple[Any, Any]:
        from tools.tau2.domain import import_tau2

        import_tau2()
        from tau2.user.user_simulator import UserSimulator

        user = UserSimulator(instructions=str(tau2_task.user_scenario), llm=self.model, llm_args=self.llm_args)
        return user, user.get_init_state()

    async def open(self, episode_id: str, tau2_task_json: dict[str, Any]) -> None:
        from tools.tau2.domain import import_tau2

        import_tau2()
        from tau2.data_model.tasks import Task as Tau2Task

        task = Tau2Task.model_validate(tau2_task_json)
        self._live[episode_id] = await asyncio.to_thread(self._new_user, task)

    async def reply(self, episode_id: str, agent_text: str) -> dict[str, Any]:
        """The user's answer to the agent's message: {text, stop, cost_usd, latency_s, tokens_in, tokens_out,
        error}. A failed LLM call is returned with `error` set (the driver ends the episode as user_error)."""
        if episode_id not in self._live:
            return {"text": "", "stop": None, "error": f"no open user conversation for episode {episode_id}"}
        from tau2.data_model.message import AssistantMessage

        user, state = self._live[episode_id]
        start = time.perf_counter()
        try:
            msg, state = await asyncio.to_thread(user.generate_next_message,
                                                 AssistantMessage(role="assistant", content=agent_text), state)
        except Exception as e:
            return {"text": "", "stop": None, "latency_s": time.perf_counter() - start,
                    "error": f"user simulator failed: {type(e).__name__}: {str(e)[:300]}"}
        self._live[episode_id] = (user, state)
        usage = msg.usage or {}
        return {"text": msg.content or "", "stop": stop_kind(msg.content), "cost_usd": float(msg.cost or 0.0),
                "latency_s": time.perf_counter() - start, "tokens_in": int(usage.get("prompt_tokens") or 0),
                "tokens_out": int(usage.get("completion_tokens") or 0), "error": None}

    async def close(self, episode_id: str) -> None:
        self._live.pop(episode_id, None)

    def open_count(self) -> int:
        return len(self._live)
