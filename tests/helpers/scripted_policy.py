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
