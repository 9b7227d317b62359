"""Scripted policies: engines whose "generation" is a tool call chosen by a rule, tokenized like real output.

They let fixed routers run through the very same agent loop, tools and accounting as the learned policy:
SFT demonstrations (random tool choices over the task's catalogue, orchestra/data/demos.py) and evaluation baselines
(always-strongest, always-cheapest, random, heuristic, oracle; orchestra/eval/baselines.py). A `Router` maps the
episode state to the next call; `RouterEngine` turns that into token ids ending with the end-of-turn token.
Logprobs are 0.0 (a script is deterministic); nothing here is trained.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from orchestra.agent.parse import call_text, tiers_of  # noqa: F401  (re-exported: scripts are built from them)
from orchestra.engine import Generation, Sampling
from orchestra.types import Task


def random_episode(task: Task, schemas: list[dict[str, Any]], rng: random.Random, max_pre_calls: int = 2,
                   final_tool: str = "answer") -> list[str]:
    """A valid episode script with random tool choices: 0..max_pre_calls non-final calls, then the final tool.
    Every tool is called with a random tier from its schema (SFT teaches the format, not the routing)."""
    by_name = {s.get("function", s)["name"]: s for s in schemas}
    others = [n for n in by_name if n != final_tool and tiers_of(by_name[n])]
    script = []
    for _ in range(rng.randint(0, max_pre_calls) if others else 0):
        name = rng.choice(others)
        script.append(call_text(name, {"model": rng.choice(tiers_of(by_name[name]))}))
    if final_tool in by_name:
        tiers = tiers_of(by_name[final_tool])
        script.append(call_text(final_tool, {"model": rng.choice(tiers)} if tiers else {}))
    return script


class RouterEngine:
    """Engine over a script: `choose(turn, prompt_text)` returns the reply text for that turn."""

    def __init__(self, tokenizer: Any, choose: Callable[[int, str], str], eos_token_id: int):
        self.tok, self.choose, self.eos = tokenizer, choose, eos_token_id
        self.turn = 0

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        text = self.choose(self.turn, self.tok.decode(prompt_ids, skip_special_tokens=False))
        self.turn += 1
        ids = list(self.tok.encode(text, add_special_tokens=False)) + [self.eos]
        if len(ids) > sampling.max_tokens:
            return Generation(ids[: sampling.max_tokens], [0.0] * sampling.max_tokens, "length")
        return Generation(ids, [0.0] * len(ids), "stop")


def as_rule(script: list[str] | Callable[[int, str], str]) -> Callable[[int, str], str]:
    """A script as a rule (turn, prompt text) -> the next call: fixed call texts replay in order, the last one
    repeating if the episode runs longer; a rule (orchestra/routing/cascade.py `choose`) is itself."""
    if callable(script):
        return script
    return lambda turn, _prompt: script[min(turn, len(script) - 1)]


def noted(script: list[str] | Callable[[int, str], str], note: Callable[[str], str]) -> Callable[[int, str], str]:
    """`script` whose every call opens with `note(prompt text)` (e.g. orchestra/agent/prompt.preference_note)."""
    rule = as_rule(script)
    return lambda turn, prompt: note(prompt) + rule(turn, prompt)


def script_engine(tokenizer: Any, script: list[str] | Callable[[int, str], str], eos_token_id: int) -> RouterEngine:
    """One episode's engine playing `script` (`as_rule`)."""
    return RouterEngine(tokenizer, as_rule(script), eos_token_id)


# What a finished step leaves in a reprompt-mode prompt (orchestra.agent.prompt.Prompter.reprompt_user): its section,
# or, when the call failed, the agent loop's "Previous attempts" note `name(tier) -> ...`.
_STEP_SECTIONS = {"search": "\n\nDocuments:\n", "enhance_reasoning": "\n\nCode outputs:\n"}


class _PlanCodec:
    """The tokenizer as a plan engine uses it: a scripted engine re-reads whole prompts, and HF's `decode`
    first walks every id in Python, which was most of the engine's cost; the fast tokenizer's backend decodes
    the same ids directly. The few fixed replies are encoded once."""

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        self.backend = getattr(tokenizer, "backend_tokenizer", None)
        self.replies: dict[str, list[int]] = {}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        if self.backend is not None:
            return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if text not in self.replies:
            self.replies[text] = list(self.tok.encode(text, add_special_tokens=add_special_tokens))
        return self.replies[text]


def plan_engine(model: Any, tokenizer: Any, *, plan: list[str], eos_token_id: int | None = None) -> RouterEngine:
    """An `engine.kind` factory (actors/rollout_worker.build_engine, `orchestra.agent.scripted:plan_engine`) for
    benchmarks: every episode follows `plan`, entries `tool:tier` (e.g. "search:search-3", "answer:answer-4").
    One engine serves many concurrent episodes, so the step is read from the prompt instead of counted: the next
    step is the first whose trace the prompt lacks. Reprompt context mode only; `model` is unused."""
    steps = []
    for entry in plan:
        name, _, tier = str(entry).partition(":")
        if not name:
            raise ValueError(f"plan entries are 'tool:tier' or 'tool', got {entry!r}")
        steps.append((name, tier, call_text(name, {"model": tier} if tier else {})))
    if not steps:
        raise ValueError("plan is empty")
    if eos_token_id is None:
        from orchestra.engine import eos_token_ids

        eos_token_id = eos_token_ids(tokenizer)[0]

    def choose(_turn: int, prompt: str) -> str:
        for name, tier, text in steps[:-1]:
            section = _STEP_SECTIONS.get(name)
            if not ((section and section in prompt) or f"{name}({tier or name}) ->" in prompt):
                return text
        return steps[-1][2]

    return RouterEngine(_PlanCodec(tokenizer), choose, eos_token_id)
