"""Tool-server actors on the shared local Ray cluster: timeout, retry with backoff, queueing vs service time,
concurrency, rate limit, result cache, crash -> restart with in-flight calls as error results, a zoo tool built
inside the actor, and the spend ledger's cap under 200 concurrent paid calls."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from orchestra.config import load_config
from orchestra.types import Task, ToolCall, ToolContext, ToolResult
from tools.registry import zoo_dict


class TestTool:
    """Test double hosted by the actors: sleeps, fails (retryably) a set number of times, crashes, or charges."""

    __test__ = False  # not a pytest class
    name, description = "testtool", "a tool for testing tool servers"
    parameters = {"type": "object", "properties": {"sleep": {"type": "number"}, "fail": {"type": "integer"},
                                                   "key": {"type": "string"}, "crash": {"type": "boolean"},
                                                   "fatal": {"type": "boolean"}}}

    def __init__(self, price: float = 0.0):
        self.price = price
        self.failures: dict[str, int] = {}
        self.calls = 0

    def schema(self, task=None):
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def cost_bound(self, args, ctx):
        return self.price

    async def call(self, args, ctx):
        self.calls += 1
        if args.get("crash"):
            os._exit(1)  # the actor process dies mid-call
        if args.get("sleep"):
            await asyncio.sleep(args["sleep"])
        key = args.get("key", "")
        if self.failures.get(key, 0) < args.get("fail", 0):
            self.failures[key] = self.failures.get(key, 0) + 1
            return ToolResult.failure("transient", cost_usd=self.price / 2, meta={"retryable": True})
        if args.get("fatal"):
            return ToolResult.failure("permanent")
        return ToolResult(f"done {self.calls}", cost_usd=self.price, latency_s=args.get("sleep", 0.0),
                          meta={"calls": self.calls})


def free_tool():
    return TestTool()


def paid_tool():
    return TestTool(price=0.01)


@pytest.fixture(scope="module")
def ray(ray_cluster):
    # the test tools travel by value: workers cannot import this test module
    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return ray_cluster


def _start(tag: str, factory=free_tool, **kw):
    from actors.tool_server import make_tool_server

    return make_tool_server("testtool", {}, actor_name=f"tool:testtool-{tag}-{os.getpid()}", factory=factory, **kw)


@pytest.fixture(scope="module")
def servers(ray):
    """All actors of this module, started together (actor start-up dominates the module's time)."""
    from actors.spend_ledger import make_spend_ledger
    from actors.tool_server import make_tool_servers

    ledger = make_spend_ledger(0.505, name=f"ledger-{os.getpid()}")  # room for exactly 50 calls at $0.01
    handles = {
        "general": _start("general", timeout_s=0.5, retries=2, backoff_s=0.02, max_concurrency=4),
        "crashy": _start("crashy", max_restarts=2, timeout_s=10.0),
        "paid": _start("paid", factory=paid_tool, ledger=ledger, max_concurrency=64),
    }
    # allow_unconfined: the actors' plumbing is under test, so expert code also runs on a host without bubblewrap
    zoo = zoo_dict(load_config(["zoo.spend_cap_usd=1.0", "zoo.sandbox.allow_unconfined=true"]).zoo)
    zoo_handles, zoo_ledger = make_tool_servers(zoo, ["answer", "enhance_reasoning"], name_suffix=f"-{os.getpid()}")
    handles.update(zoo_handles)
    ray.get([h.ready.remote() for h in handles.values()], timeout=90)
    handles["ledger"], handles["zoo_ledger"] = ledger, zoo_ledger
    return handles


def _client(handles, timeout_s=30.0, max_in_flight=0):
    from actors.tool_client import RayToolClient

    return RayToolClient(handles, timeout_s=timeout_s, max_in_flight=max_in_flight)


def _ctx(i=0) -> ToolContext:
    return ToolContext(task=Task(id=f"t{i}", problem="p", answer="a"))


def _call(**args) -> ToolCall:
    return ToolCall(name="testtool", arguments=args)


async def test_timeout_retry_and_permanent_errors(servers):
    client = _client({"testtool": servers["general"]})
    start = time.perf_counter()
    late = await client.call(_call(sleep=5), _ctx())
    assert not late.ok and late.meta["timeout"] and "timed out after 0.5s" in late.error
    assert time.perf_counter() - start < 3.0
    flaky = await client.call(_call(fail=2, key="flaky"), _ctx())
    assert flaky.ok and flaky.meta["attempts"] == 3 and flaky.meta["retry_wait_s"] == pytest.approx(0.06)
    hopeless = await client.call(_call(fail=10, key="hopeless"), _ctx())
    assert not hopeless.ok and hopeless.meta["attempts"] == 3  # bounded: 1 + 2 retries
    fatal = await client.call(_call(fatal=True), _ctx())
    assert not fatal.ok and fatal.meta["attempts"] == 1  # not flagged retryable: not retried
    bad = await client.call(_call(sleep="slow"), _ctx())
    assert not bad.ok and bad.meta.get("invalid_arguments")
    unknown = await client.call(ToolCall(name="nope", arguments={}), _ctx())
    assert not unknown.ok and unknown.meta["unknown_tool"]


async def test_concurrency_and_queueing_are_reported_apart(servers):
    client = _client({"testtool": servers["general"]})
    start = time.perf_counter()
    results = await asyncio.gather(*[client.call(_call(sleep=0.4), _ctx(i)) for i in range(4)])
    assert time.perf_counter() - start < 0.4 * 2  # 4 slots: one call's time, not four
    assert all(r.ok and r.latency_s == pytest.approx(0.4) for r in results)
    start = time.perf_counter()
    results = await asyncio.gather(*[client.call(_call(sleep=0.3), _ctx(i)) for i in range(8)])
    queued = sorted(r.meta["queue_s"] for r in results)
    assert queued[:4] == pytest.approx([0, 0, 0, 0], abs=0.1) and min(queued[4:]) > 0.2  # 8 calls, 4 slots
    assert all(r.latency_s == pytest.approx(0.3) for r in results)  # service time excludes the wait


async def test_client_cap_spans_all_tools(servers):
    """max_in_flight=2 caps calls over every tool of the client: 4 calls to two servers run two by two."""
    client = _client({"testtool": servers["general"], "other": servers["crashy"]}, max_in_flight=2)
    calls = [ToolCall(name=("testtool", "other")[i % 2], arguments={"sleep": 0.3}) for i in range(4)]
    start = time.perf_counter()
    results = await asyncio.gather(*[client.call(c, _ctx(i)) for i, c in enumerate(calls)])
    assert time.perf_counter() - start >= 0.6  # two rounds, although each server alone has room for all
    queued = sorted(r.meta["queue_s"] for r in results)
    assert all(r.ok for r in results) and queued[:2] == pytest.approx([0, 0], abs=0.1) and min(queued[2:]) > 0.2


async def test_rate_limit_and_cache_in_process():
    """ToolServer is a plain async class: its rate limit and cache are checked without an actor."""
    from actors.tool_server import ToolServer

    server = ToolServer({}, "testtool", factory=free_tool, rate_limit_per_s=20.0, rate_burst=1, cache_size=8)
    start = time.perf_counter()
    results = await asyncio.gather(*[server.call(_call(key=str(i)).to_dict(), _ctx(i)) for i in range(11)])
    assert time.perf_counter() - start >= 0.45  # 20 calls/s, burst 1: the 11th call starts after 0.5 s
    assert max(r.meta["queue_s"] for r in results) >= 0.45  # the wait is queueing, not service time
    first = await server.call(_call(key="same").to_dict(), _ctx(99))
    again = await server.call(_call(key="same").to_dict(), _ctx(99))
    assert again.meta["cached"] and again.cost_usd == 0 and again.text == first.text
    other = await server.call(_call(key="same").to_dict(), _ctx(98))  # another task: not a cache hit
    assert not other.meta.get("cached") and server.stats()["cache_hits"] == 1


async def test_crash_gives_error_results_then_restart_serves(servers):
    client = _client({"testtool": servers["crashy"]}, timeout_s=30.0)
    slow = [asyncio.ensure_future(client.call(_call(sleep=3), _ctx(i))) for i in range(3)]
    await asyncio.sleep(0.3)
    crash = await client.call(_call(crash=True), _ctx())
    in_flight = await asyncio.gather(*slow)
    for r in [crash, *in_flight]:
        assert not r.ok and r.meta["actor_error"] and "restarted" in r.error
    deadline = time.monotonic() + 60
    while True:  # the restarted actor serves later calls
        later = await client.call(_call(), _ctx())
        if later.ok or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert later.ok and later.meta["calls"] == 1  # a fresh process: its call counter restarted


async def test_zoo_tool_built_inside_the_actor(ray, servers):
    client = _client({"answer": servers["answer"]})
    task = Task(id="z1", problem="What is 2+2?", answer="4", tools=["answer"],
                meta={"family": "arith", "difficulty": 1})
    schemas = await client.aschemas(task)
    assert schemas[0]["function"]["parameters"]["properties"]["model"]["enum"][0] == "answer-1"
    assert client.schemas(task) == schemas  # cached: no second round trip
    r = await client.call(ToolCall(name="answer", arguments={"model": "answer-math-1"}), ToolContext(task=task))
    assert r.ok and r.meta["model"] == "qwen2.5-math-72b" and r.meta["simulated"] and "queue_s" in r.meta
    state = ray.get(servers["zoo_ledger"].state.remote())  # zoo.spend_cap_usd made a ledger; the call paid it
    assert state["cap"] == 1.0 and state["spent"] == pytest.approx(r.cost_usd) and state["settled"] == 1


async def test_agent_loop_episode_through_tool_servers(servers):
    """One episode of the real agent loop: enhance_reasoning runs expert code in the actor's sandbox, answer ends it."""
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from orchestra.engine import Sampling
    from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text

    tok = ByteTokenizer()
    engine = ScriptedEngine(tok, [call_text("enhance_reasoning", model="reasoner-3"),
                                  call_text("answer", model="answer-math-2")])
    client = _client({n: servers[n] for n in ("answer", "enhance_reasoning")})
    task = Task(id="e1", problem="Compute 6*7.", answer="42", tools=["enhance_reasoning", "answer"],
                meta={"family": "arith", "difficulty": 1, "code": "print(6 * 7)"})
    await client.aschemas(task)
    traj = await AgentLoop(engine, client, Prompter(tok)).run(task, Sampling(max_tokens=200))
    assert traj.termination == "answered" and traj.answer
    first = traj.tool_records[0].result
    assert first.ok and first.meta["code_output"].strip() and first.meta["model"] == "qwen2.5-coder-32b"
    assert traj.cost_usd == pytest.approx(sum(r.result.cost_usd for r in traj.tool_records)) and traj.cost_usd > 0
    assert traj.tool_counts == {"reasoner-3": 1, "answer-math-2": 1}


async def test_spend_ledger_cap_holds_under_200_concurrent_paid_calls(ray, servers):
    ledger = servers["ledger"]
    client = _client({"testtool": servers["paid"]})
    results = await asyncio.gather(*[client.call(_call(sleep=0.01), _ctx(i)) for i in range(200)])
    ok = [r for r in results if r.ok]
    refused = [r for r in results if not r.ok]
    state = ray.get(ledger.state.remote())
    assert len(ok) == 50 and state["spent"] == pytest.approx(0.50) and state["spent"] <= 0.505
    assert state["reserved"] == 0 and state["open"] == 0
    assert all("budget exhausted" in r.error and r.meta["spend_cap"] for r in refused)
    assert sum(r.cost_usd for r in ok) == pytest.approx(state["spent"])


def test_ledger_expires_reservations_of_dead_calls_at_their_bound(monkeypatch):
    from actors import spend_ledger

    clock = [100.0]
    monkeypatch.setattr(spend_ledger.time, "monotonic", lambda: clock[0])
    ledger = spend_ledger.SpendLedger(1.0, ttl_s=10.0)
    lost = ledger.reserve(0.4)["token"]  # its server dies: never settled
    ledger.settle(ledger.reserve(0.3)["token"], 0.1)
    assert not ledger.reserve(0.6)["ok"]  # 0.1 spent + 0.4 still reserved
    clock[0] += 11
    assert ledger.reserve(0.5)["ok"]  # the lost reservation expired, charged at its bound
    assert ledger.state()["spent"] == pytest.approx(0.5) and ledger.state()["expired"] == 1
    assert ledger.settle(lost, 0.0) == pytest.approx(0.5)  # a late settle changes nothing
