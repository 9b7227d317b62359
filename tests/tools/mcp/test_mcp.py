"""MCP servers as tools (tools/mcp/, tools/mcp/client.py) against tests/helpers/mcp_echo_server.py, over stdio
and streamable HTTP on 127.0.0.1: listing, calling, a malformed schema, a crash mid-call, a timeout, the budget,
the tool-server wrapper, config errors, and a scripted orchestrator answering through an MCP tool."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestra.config import ConfigError, MCPServerConfig, MCPToolConfig, ZooConfig, load_config
from orchestra.types import ToolContext
from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text, make_task
from tools.base import LocalToolClient, guarded_call
from tools.mcp.catalogue import MCPCatalogue
from tools.registry import build_tools

pytestmark = pytest.mark.timeout(120)
ECHO = Path(__file__).resolve().parents[2] / "helpers" / "mcp_echo_server.py"
NAMES = ["echo__add", "echo__lookup", "echo__slow", "echo__crash", "echo__fail", "echo__env"]


def stdio_server(**kw) -> MCPServerConfig:
    return MCPServerConfig(name="echo", transport="stdio", command=sys.executable, args=[str(ECHO), "stdio"], **kw)


def start_http() -> tuple[subprocess.Popen, str]:
    """The echo server over streamable HTTP on a free local port, once it accepts connections."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(ECHO), "http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    proc.kill()
    pytest.fail("the MCP echo server did not start listening")


@pytest.fixture(scope="module")
def http_url():
    proc, url = start_http()
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def stdio_tools():
    server = stdio_server(price_usd=0.002, timeout_s=3.0, env_vars=["MCP_TEST_PASSED"],
                          tools={"lookup": MCPToolConfig(price_usd=0.01)})
    zoo = ZooConfig(tools=NAMES, mcp_servers=[server])
    return build_tools(zoo)


def ctx(budget: float | None = None) -> ToolContext:
    return ToolContext(task=make_task(), budget_usd_left=budget)


def test_catalogue_lists_tools_and_skips_a_malformed_schema(caplog):
    with caplog.at_level(logging.WARNING, logger="tools.mcp.catalogue"):
        names = MCPCatalogue([stdio_server()]).names()
    assert sorted(names) == sorted(NAMES)
    assert any("'echo'" in r.getMessage() and "'broken'" in r.getMessage() and "properties/x/type" in r.getMessage()
               for r in caplog.records)


def test_tools_named_in_the_zoo_carry_the_servers_schema_and_configured_price(stdio_tools):
    add, lookup = stdio_tools["echo__add"], stdio_tools["echo__lookup"]
    fn = add.schema()["function"]
    assert fn["name"] == "echo__add" and fn["parameters"]["required"] == ["a", "b"]
    assert "Add two integers" in fn["description"] and "$0.002 per call" in fn["description"]
    assert add.cost_bound({}, ctx()) == 0.002 and lookup.cost_bound({}, ctx()) == 0.01  # per-tool override


@pytest.mark.parametrize("name, problem", [("echo__broken", "properties/x/type"), ("echo__nope", "has no tool")])
def test_a_named_tool_that_is_malformed_or_missing_is_refused_naming_server_and_tool(name, problem):
    with pytest.raises(ConfigError, match=problem) as err:
        build_tools(ZooConfig(tools=[name], mcp_servers=[stdio_server()]))
    assert "'echo'" in str(err.value) and name.split("__")[1] in str(err.value)


@pytest.mark.parametrize("schema, problem", [
    ([], "must be a JSON object"),
    ({"type": "array"}, "root must have type 'object'"),
    ({"type": "object", "properties": {"x": {"type": 12}}}, "properties/x/type"),
    ({"type": "object", "properties": {"x": {"$ref": "https://example.invalid/x.json"}}}, "external schemas"),
    ({"type": "object", "$defs": {"n": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/n"}}}, None),
])
def test_schema_problems(schema, problem):
    from tools.mcp.catalogue import schema_problem

    found = schema_problem(schema)
    assert (found is None) if problem is None else (problem in found)


async def _calls(tools: dict) -> None:
    ok = await guarded_call(tools["echo__add"], {"a": 2, "b": 3}, ctx())
    assert ok.ok and ok.text == "5" and ok.meta["structured"] == {"result": 5} and ok.meta["mcp_server"] == "echo"
    assert ok.cost_usd == tools["echo__add"].price_usd and 0 < ok.latency_s < 5
    fact = await guarded_call(tools["echo__lookup"], {"key": "capital of France"}, ctx())
    assert fact.text == "Paris"
    bad = await guarded_call(tools["echo__add"], {"a": "two"}, ctx())  # refused before the server sees it
    assert bad.error and bad.meta["invalid_arguments"] and "'b'" in bad.error
    missing = await guarded_call(tools["echo__lookup"], {"key": "moon"}, ctx())  # the server's own error
    assert missing.error and "no fact for 'moon'" in missing.error
    failed = await guarded_call(tools["echo__fail"], {}, ctx())
    assert failed.error and failed.text.startswith("Error: echo__fail")
    together = await asyncio.gather(*[guarded_call(tools["echo__add"], {"a": i, "b": i}, ctx()) for i in range(5)])
    assert [r.text for r in together] == [str(2 * i) for i in range(5)]  # concurrent calls share one session


def test_calls_over_stdio(stdio_tools):
    asyncio.run(_calls(stdio_tools))


def test_a_stdio_server_gets_only_the_environment_variables_named_for_it(stdio_tools, monkeypatch):
    monkeypatch.setenv("MCP_TEST_PASSED", "yes")
    monkeypatch.setenv("MCP_TEST_SECRET", "hunter2")  # not named in env_vars: must not reach the server

    async def go():
        env = stdio_tools["echo__env"]
        return [(await guarded_call(env, {"name": n}, ctx())).text for n in ("MCP_TEST_PASSED", "MCP_TEST_SECRET")]

    assert asyncio.run(go()) == ["yes", "(unset)"]


def test_calls_over_streamable_http(http_url):
    server = MCPServerConfig(name="echo", transport="http", url=http_url, price_usd=0.001)
    asyncio.run(_calls(build_tools(ZooConfig(tools=NAMES, mcp_servers=[server]))))


def test_a_slow_call_times_out_as_an_error_and_the_session_survives(stdio_tools):
    async def go():
        start = time.perf_counter()
        slow = await guarded_call(stdio_tools["echo__slow"], {"seconds": 30}, ctx())
        assert time.perf_counter() - start < 10
        assert slow.error and "timed out after 3s" in slow.error and slow.meta["timeout"]
        assert not slow.meta["retryable"] and slow.cost_usd == 0.002  # it reached the server: charged
        assert (await guarded_call(stdio_tools["echo__add"], {"a": 1, "b": 1}, ctx())).text == "2"

    asyncio.run(go())


def test_a_server_crashing_mid_call_is_an_error_and_stdio_reconnects(stdio_tools):
    async def go():
        crash = await guarded_call(stdio_tools["echo__crash"], {}, ctx())
        assert crash.error and crash.meta["retryable"] and "echo__crash" in crash.error
        again = await guarded_call(stdio_tools["echo__add"], {"a": 4, "b": 4}, ctx())  # a fresh server process
        assert again.ok and again.text == "8"

    asyncio.run(go())


def test_an_http_server_crashing_mid_call_and_staying_down_gives_errors_not_exceptions():
    proc, url = start_http()
    try:
        server = MCPServerConfig(name="echo", transport="http", url=url, timeout_s=5, connect_timeout_s=5)
        tools = build_tools(ZooConfig(tools=["echo__crash", "echo__add"], mcp_servers=[server]))

        async def go():
            crash = await guarded_call(tools["echo__crash"], {}, ctx())
            assert crash.error and crash.meta["retryable"]
            proc.wait(timeout=10)
            down = await guarded_call(tools["echo__add"], {"a": 1, "b": 2}, ctx())
            assert down.error and down.meta["retryable"] and down.cost_usd == 0.0  # never sent: not charged
            assert "cannot connect to server 'echo'" in down.error and url not in down.error  # it may hold a token

        asyncio.run(go())
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_messages_never_carry_the_server_url():
    from tools.mcp.client import MCPConnection

    conn = MCPConnection("kb", "http", url="https://user:s3cret@kb.example/mcp?token=abc")
    assert conn.redact("ConnectError for https://user:s3cret@kb.example/mcp?token=abc") == "ConnectError for <kb url>"


def test_the_episode_budget_refuses_a_paid_mcp_call(stdio_tools):
    refused = asyncio.run(guarded_call(stdio_tools["echo__lookup"], {"key": "capital of France"}, ctx(0.005)))
    assert refused.meta["budget_refused"] and "budget exhausted" in refused.error


def test_tool_server_wraps_mcp_tools_with_its_timeout_and_retries():
    from actors.tool_server import ToolServer  # the plain class the tool-server actors run

    zoo = dataclasses.asdict(ZooConfig(tools=["echo__slow", "echo__crash"], mcp_servers=[stdio_server()]))

    async def go():
        slow = ToolServer(zoo, "echo__slow", timeout_s=3.0, retries=0)  # room for the first call's connect
        timed_out = await slow.call({"arguments": {"seconds": 30}}, ctx())
        assert timed_out.meta["timeout"] and "timed out after 3s" in timed_out.error
        assert (await slow.call({"arguments": {"seconds": 0}}, ctx())).text == "slept 0.0s"
        crash = ToolServer(zoo, "echo__crash", timeout_s=20, retries=1, backoff_s=0.0)
        crashed = await crash.call({"arguments": {}}, ctx())
        assert crashed.error and crashed.meta["attempts"] == 2 and crash.counts["retries"] == 1

    asyncio.run(go())


def test_tool_server_actors_host_mcp_tools_under_the_run_spend_cap(ray_cluster):
    from actors.tool_client import RayToolClient
    from actors.tool_server import make_tool_servers
    from orchestra.types import ToolCall

    zoo = dataclasses.asdict(ZooConfig(tools=["echo__add"], mcp_servers=[stdio_server(price_usd=0.01)],
                                       spend_cap_usd=0.025))
    handles, ledger = make_tool_servers(zoo, name_suffix="-mcp-test")
    client = RayToolClient(handles)

    async def go():
        return [await client.call(ToolCall("echo__add", {"a": i, "b": 1}), ctx()) for i in range(3)]

    try:
        first, second, third = asyncio.run(go())
        assert (first.text, second.text) == ("1", "2") and first.cost_usd == 0.01
        assert third.meta["spend_cap"] and "budget exhausted" in third.error  # a third $0.01 call would pass $0.025
        assert ray_cluster.get(ledger.state.remote())["spent"] == pytest.approx(0.02)
    finally:
        for h in [*handles.values(), ledger]:
            ray_cluster.kill(h)


@pytest.mark.parametrize("entry, key", [
    ("{name: calc, transport: carrier-pigeon, command: x}", "zoo.mcp_servers[0].transport"),
    ("{name: calc, transport: stdio}", "zoo.mcp_servers[0].command"),
    ("{name: calc, transport: http, url: 'ftp://x'}", "zoo.mcp_servers[0].url"),
    ("{name: 'a__b', command: x}", "zoo.mcp_servers[0].name"),
    ("{name: calc, command: x, price_usd: -1}", "zoo.mcp_servers[0].price_usd"),
    ("{name: calc, command: x, tools: {add: {price_usd: -1}}}", "zoo.mcp_servers[0].tools.add.price_usd"),
    ("{name: calc, command: x, bogus: 1}", "bogus"),
    ("{name: calc, command: x, timeout_s: soon}", "timeout_s"),
])
def test_malformed_mcp_server_entries_name_the_key(entry, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        load_config([f"zoo.mcp_servers=[{entry}]"])


def test_duplicate_servers_and_dict_zoos_are_checked_too():
    with pytest.raises(ConfigError, match=r"zoo.mcp_servers\[1\].name"):
        load_config(["zoo.mcp_servers=[{name: a, command: x}, {name: a, command: y}]"])
    with pytest.raises(ConfigError, match=r"zoo.mcp_servers\[0\].command"):  # the registry path (actors get dicts)
        build_tools({"tools": ["a__add"], "mcp_servers": [{"name": "a", "transport": "stdio"}]})


def test_a_scripted_orchestrator_answers_through_an_mcp_tool(stdio_tools):
    """The agent loop with a scripted policy: look the fact up on the MCP server, answer with what it returned;
    the reward side judges the answer right and charges the tool's price."""
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from orchestra.engine import Sampling
    from reward.score import score_episode

    tok = ByteTokenizer()

    def policy(prompt: str) -> str:
        seen = re.findall(r"<tool_response>\s*(.*?)\s*</tool_response>", prompt, re.S)
        return seen[-1] if seen else call_text("echo__lookup", key="capital of France")

    task = make_task(problem="What is the capital of France?", answer="Paris", tools=["echo__lookup"])
    engine = ScriptedEngine(tok, policy)
    loop = AgentLoop(engine, LocalToolClient(stdio_tools), Prompter(tok), context_mode="transcript",
                     answer_mode="text", eos_token_ids=[tok.eos_token_id])
    traj = asyncio.run(loop.run(task, Sampling(max_tokens=200, temperature=1.0), uid="g"))
    assert "echo__lookup" in tok.decode(engine.prompts[0])  # the MCP tool is in the catalogue the policy sees
    assert traj.termination == "answered" and traj.answer == "Paris"
    assert traj.tool_counts == {"echo__lookup": 1} and traj.cost_usd == pytest.approx(0.01)
    correct, cost, _latency, reward = asyncio.run(score_episode(traj, task, judges={}))
    assert correct and cost == pytest.approx(0.01) and reward > 0
