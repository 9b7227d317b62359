"""orchestra/agent/call_cache.py: each distinct tool call made once, replayed to every later or concurrent caller;
failures never kept; τ² tasks bypass it; and exploration through it yields the outcomes it yields without it."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from orchestra.agent.call_cache import CallCache
from orchestra.agent.prompt import Prompter
from orchestra.data.synth.template import generate_tasks
from orchestra.routing.explore import explore
from orchestra.routing.plans import enumerate_plans
from orchestra.types import Task, ToolCall, ToolContext, ToolResult
from reward.score import episode_scorer
from tests.helpers.fakes import ByteTokenizer


class Counting:
    """A ToolClient that counts the calls reaching it; `fail` results first, then successes."""

    def __init__(self, fail: int = 0, delay: float = 0.0):
        self.made, self.fail, self.delay = 0, fail, delay

    def schemas(self, task: Task) -> list:
        return []

    async def call(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        self.made += 1
        await asyncio.sleep(self.delay)
        if self.made <= self.fail:
            return ToolResult.failure("timed out")
        return ToolResult(f"{call.name} {call.arguments} #{self.made}", cost_usd=0.01 * self.made, latency_s=2.0,
                          meta={"n": self.made})


def task(pref: dict, category: str = "qa") -> Task:
    return Task(id="t1", problem="2+2?", answer="4", category=category, pref=pref)


def test_a_call_is_made_once_and_replayed_with_its_cost_whatever_the_preference():
    inner = Counting()
    cache = CallCache(inner)
    call = ToolCall("answer", {"model": "answer-1"})

    async def play():
        first = await cache.call(call, ToolContext(task=task({"accuracy": 1.0, "cost": 0.05})))
        first.meta["n"] = -1  # a caller changing its copy changes no one else's
        again = await cache.call(call, ToolContext(task=task({"accuracy": 1.0, "cost": 2.0}), episode_id="other"))
        other = await cache.call(call, ToolContext(task=task({}), code_outputs=["4"]))  # another context: made
        return first, again, other

    first, again, other = asyncio.run(play())
    assert inner.made == 2 and (cache.calls, cache.made) == (3, 2)
    assert (again.text, again.cost_usd, again.latency_s, again.meta["n"]) == (first.text, 0.01, 2.0, 1)
    assert other.text.endswith("#2")
    assert "3 asked, 2 made" in cache.line()


def test_concurrent_callers_wait_for_the_first_and_a_failure_is_not_kept():
    inner = Counting(delay=0.05)
    cache = CallCache(inner)
    call, ctx = ToolCall("search", {"query": "q"}), ToolContext(task=task({}))

    async def many():
        return await asyncio.gather(*(cache.call(call, ctx) for _ in range(5)))

    results = asyncio.run(many())
    assert inner.made == 1 and {r.text for r in results} == {results[0].text}

    failing = CallCache(Counting(fail=1))
    out = [asyncio.run(failing.call(call, ctx)) for _ in range(3)]
    assert [r.ok for r in out] == [False, True, True] and failing.made == 2  # the second caller made it itself


def test_tau2_tasks_are_never_replayed():
    inner = Counting()
    cache = CallCache(inner)
    ctx = ToolContext(task=task({}, category="func_call"))
    for _ in range(2):
        asyncio.run(cache.call(ToolCall("get_order", {"id": "1"}), ctx))
    assert inner.made == 2


def test_exploration_through_the_cache_has_the_same_outcomes_with_fewer_calls():
    """Every plan of the simulated zoo (answer, and enhance_reasoning's program run in the sandbox, then answer) on
    every task: the same rows, $ and seconds of the simulated experts included, with each shared first call made once."""
    from orchestra.config import load_config
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    zoo = load_config().zoo
    tasks = [t for t in generate_tasks(12, 3, split="train", mapping=zoo.tiers).tasks][:6]
    tools = LocalToolClient(build_tools(dataclasses.replace(zoo, seed=zoo.seed), names=["enhance_reasoning", "answer"]))
    tok = ByteTokenizer()
    plans = enumerate_plans(tools.schemas(tasks[0]))
    assert any(len(p.calls) == 2 for p in plans)
    score = episode_scorer({"default": "exact"}, cost_scale=0.01, latency_scale=10.0)

    def rows(client):
        out = explore(tasks, plans, client, tok, Prompter(tok), tok.eos_token_id, agent_kwargs={"max_turns": 3},
                      score=score)
        return {(o.task_id, o.plan): (o.correct, round(o.cost_usd, 12), o.answer) for o in out}

    cache = CallCache(tools)
    assert rows(cache) == rows(tools)
    asked = sum(len(p.calls) for p in plans) * len(tasks)
    assert cache.calls == asked and cache.made < asked  # each task's program written and run once, not per plan


def test_a_bounded_cache_drops_the_least_recently_used_and_lends_the_rest_of_its_client():
    inner = Counting()
    inner.aschemas = "the inner client's"  # e.g. RayToolClient.aschemas, which the rollout worker warms up with
    cache = CallCache(inner, max_kept=2)
    ctx = ToolContext(task=task({}))

    def ask(*queries: str) -> None:
        for q in queries:
            asyncio.run(cache.call(ToolCall("search", {"query": q}), ctx))

    ask("a", "b", "a", "c")  # "a" used again after "b": "b" is the one dropped when "c" comes
    assert inner.made == 3 and len(cache.kept) == 2
    ask("a", "c", "b")
    assert inner.made == 4  # only "b" made again
    assert cache.aschemas == "the inner client's" and not hasattr(CallCache(Counting()), "aschemas")
    with pytest.raises(ValueError, match="max_kept"):
        CallCache(inner, max_kept=-1)
