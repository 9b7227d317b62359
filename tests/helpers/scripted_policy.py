"""An engine factory for `engine.kind=tests.helpers.scripted_policy:scripted_engine` in tests: actors/rollout_worker.build_engine
calls it with the loaded policy's (model, tokenizer) and engine_kwargs; the policy's replies come from `script`
(tests/helpers/fakes.ScriptedEngine), so a rollout worker runs real episodes without a trained model."""

from __future__ import annotations

from typing import Any


def scripted_engine(model: Any, tokenizer: Any, script: list[str] | None = None, **_: Any) -> Any:
    from tests.helpers.fakes import ScriptedEngine

    if not script:
        raise ValueError("scripted_engine needs engine_kwargs['script']: the policy's replies, one per turn")
    return ScriptedEngine(tokenizer, list(script))


def fixed_route(model: Any, tokenizer: Any, plan: tuple[str, ...] = ("answer:answer-2",), **_: Any) -> Any:
    """`engine.kind=tests.helpers.scripted_policy:fixed_route`: a policy blind to its preference by construction (every
    episode plays `plan`, whatever the prompt says): a run that loses the preference, for the run's verdict."""
    from orchestra.agent.scripted import plan_engine

    return Unlearning(plan_engine(model, tokenizer, plan=list(plan)))


# the cost word of the prompt's "Priorities: cost <level>, ..." line -> the answer tier it calls, dearer to cheaper
# (sim zoo: gpt-5, gpt-5-mini, llama-3.3-70b, qwen2.5-math-7b)
BY_COST_WORD = {"minimal": "answer-1", "low": "answer-2", "medium": "answer-3", "high": "answer-math-2",
                "top": "answer-math-2", "none": "answer-1"}


def cost_reader(model: Any, tokenizer: Any, **_: Any) -> Any:
    """`engine.kind=tests.helpers.scripted_policy:cost_reader`: a policy that follows its preference by construction
    (one answer call, its tier read off the prompt's cost word): a run whose verdict must pass."""
    import re

    from orchestra.agent.scripted import RouterEngine, call_text
    from orchestra.engine import eos_token_ids

    def choose(_turn: int, prompt: str) -> str:
        words = re.findall(r"Priorities: cost (\w+)", prompt)
        return call_text("answer", {"model": BY_COST_WORD[words[-1]]})

    return Unlearning(RouterEngine(tokenizer, choose, eos_token_ids(tokenizer)[0]))


class Unlearning:
    """A scripted engine in a training run: the learner's weight syncs reach it and change nothing (its rule is the
    policy)."""

    def __init__(self, engine: Any):
        self.engine = engine

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        return await self.engine.generate(prompt_ids, sampling)

    def load_weights(self, state_dict: dict[str, Any], version: int, partial: bool = False) -> None:
        pass
