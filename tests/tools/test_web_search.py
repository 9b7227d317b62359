"""Web search against a fake Tavily server on 127.0.0.1: success, bad key, no key, timeout, connection
refused, and the on-disk cache (a second call is served from disk: $0, server not hit). The key never
appears in results, errors or logs."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestra.types import Task, ToolContext
from tools.web_search import WebSearch

GOOD_KEY = "tvly-test-GOODKEY-123456"
BAD_KEY = "tvly-test-BADKEY-987654"


class FakeTavily(BaseHTTPRequestHandler):
    hits: list[dict] = []

    def log_message(self, *args):  # keep test output quiet
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        FakeTavily.hits.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.path != "/search":
            return self._send(404, {"detail": {"error": "not found"}})
        if self.headers.get("Authorization") != f"Bearer {GOOD_KEY}":
            return self._send(401, {"detail": {"error": "Unauthorized: missing or invalid API key."}})
        if "slow" in body["query"]:
            time.sleep(2.0)
        results = [{"title": f"Result {i} for {body['query']}", "url": f"https://example.org/{i}",
                    "content": f"Snippet {i} about {body['query']}.", "score": 0.9 - i / 10, "raw_content": None}
                   for i in range(body.get("max_results", 5))]
        self._send(200, {"query": body["query"], "follow_up_questions": None, "answer": None, "images": [],
                         "results": results, "response_time": 0.01, "request_id": "fake"})

    def _send(self, status: int, payload: dict):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up first (the timeout test)
            pass


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeTavily)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture()
def make_tool(server, tmp_path, monkeypatch):
    FakeTavily.hits.clear()
    monkeypatch.setenv("FAKE_TAVILY_KEY", GOOD_KEY)

    def make(**kw):
        args = {"api_base_url": server, "api_key_env": "FAKE_TAVILY_KEY", "cache_dir": str(tmp_path / "cache"),
                "timeout_s": 1.0, "max_results": 3, "price_per_call": 0.008} | kw
        return WebSearch(**args)
    return make


def _ctx() -> ToolContext:
    return ToolContext(task=Task(id="t", problem="p", answer="a"))


async def test_success_then_cache_hit(make_tool, monkeypatch, tmp_path):
    tool = make_tool()
    first = await tool.call({"query": "capital of France"}, _ctx())
    assert first.ok and first.cost_usd == pytest.approx(0.008) and first.meta["cached"] is False
    assert len(first.meta["documents"]) == 3 and first.meta["urls"][0] == "https://example.org/0"
    assert "Snippet 0 about capital of France" in first.text
    assert FakeTavily.hits[0]["body"]["max_results"] == 3 and len(FakeTavily.hits) == 1
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
    monkeypatch.delenv("FAKE_TAVILY_KEY")  # a warm cache needs neither key nor network
    second = await make_tool().call({"query": "capital of France"}, _ctx())
    assert second.ok and second.cost_usd == 0 and second.meta["cached"] is True
    assert second.text == first.text and len(FakeTavily.hits) == 1
    other = await make_tool(max_results=2).call({"query": "capital of France"}, _ctx())  # different cache key
    assert not other.ok and other.meta.get("no_api_key")


async def test_bad_key_is_an_error_and_never_leaks(make_tool, monkeypatch, caplog):
    monkeypatch.setenv("FAKE_TAVILY_KEY", BAD_KEY)
    with caplog.at_level(logging.DEBUG):
        res = await make_tool().call({"query": "anything"}, _ctx())
    assert not res.ok and "401" in res.error and res.cost_usd == 0
    assert BAD_KEY not in res.text + res.error + json.dumps(res.meta) + caplog.text
    assert FakeTavily.hits[-1]["auth"] == f"Bearer {BAD_KEY}"  # it was really sent, and rejected


async def test_no_key_fails_fast_without_network(make_tool, monkeypatch):
    monkeypatch.delenv("FAKE_TAVILY_KEY")
    start = time.perf_counter()
    res = await make_tool().call({"query": "anything"}, _ctx())
    assert not res.ok and "FAKE_TAVILY_KEY" in res.error and time.perf_counter() - start < 0.5
    assert FakeTavily.hits == []


async def test_timeout_and_refused_connection(make_tool):
    start = time.perf_counter()
    slow = await make_tool(timeout_s=0.5).call({"query": "slow query"}, _ctx())
    assert not slow.ok and "timed out" in slow.error and time.perf_counter() - start < 3
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    refused = await make_tool(api_base_url=f"http://127.0.0.1:{port}").call({"query": "x"}, _ctx())
    assert not refused.ok and time.perf_counter() - start < 3 and refused.cost_usd == 0
    assert GOOD_KEY not in refused.error


async def test_bad_arguments(make_tool):
    tool = make_tool()
    for bad in ({}, {"query": ""}, {"query": 3}):
        assert not (await tool.call(bad, _ctx())).ok
    assert FakeTavily.hits == []
    with pytest.raises(ValueError):
        WebSearch(timeout_s=0)
