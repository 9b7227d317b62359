"""OpenAIExpert against a fake OpenAI-compatible server on 127.0.0.1 started by the test:
usage -> cost, 429/500 -> bounded retries then an error result, timeouts, missing keys, and the answer tool on top."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestra.types import Task, ToolContext
from tools.experts.openai import OpenAIExpert
from tools.orchestra_tools import AnswerTool
from tools.pricing import PriceTable


class FakeOpenAI:
    """Serves /v1/chat/completions from a script of (status, reply text, delay_s); the last entry repeats."""

    def __init__(self):
        self.script: list[tuple[int, str, float]] = [(200, "ok", 0.0)]
        self.requests: list[dict] = []
        self.auth: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                outer.auth.append(self.headers.get("Authorization", ""))
                i = min(len(outer.requests) - 1, len(outer.script) - 1)
                status, text, delay = outer.script[i]
                time.sleep(delay)
                if status == 200:
                    payload = {"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": text}}],
                               "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}}
                else:
                    payload = {"error": {"message": text, "type": "server_error", "code": status}}
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake():
    server = FakeOpenAI()
    yield server
    server.close()


def _expert(fake, monkeypatch, **kw) -> OpenAIExpert:
    monkeypatch.setenv("FAKE_OPENAI_KEY", "sk-test-secret-123")
    args = dict(base_url=fake.url, api_key_env="FAKE_OPENAI_KEY", retries=2, backoff_s=0.01, timeout_s=5.0)
    return OpenAIExpert("mini", "gpt-5-mini", PriceTable(), **{**args, **kw})


async def test_usage_gives_tokens_and_cost(fake, monkeypatch):
    fake.script = [(200, "The answer is \\boxed{42}", 0.0)]
    expert = _expert(fake, monkeypatch)
    reply = await expert.complete([{"role": "user", "content": "What is 6*7?"}], max_tokens=64)
    assert reply.ok and reply.text == "The answer is \\boxed{42}"
    assert (reply.tokens_in, reply.tokens_out) == (120, 30)
    assert reply.cost_usd == pytest.approx(PriceTable().cost("gpt-5-mini", 120, 30))
    assert fake.requests[0]["model"] == "gpt-5-mini" and fake.requests[0]["max_tokens"] == 64
    assert fake.auth[0] == "Bearer sk-test-secret-123"  # the key reached the server, from the env var
    assert expert.cost_bound(120, 64) >= reply.cost_usd


async def test_429_and_500_are_retried_then_succeed(fake, monkeypatch):
    fake.script = [(429, "slow down", 0.0), (500, "boom", 0.0), (200, "fine", 0.0)]
    reply = await _expert(fake, monkeypatch).complete("hi")
    assert reply.ok and reply.text == "fine" and reply.meta["attempts"] == 3
    assert len(fake.requests) == 3


async def test_persistent_errors_become_an_error_result(fake, monkeypatch):
    fake.script = [(500, "down", 0.0)]
    reply = await _expert(fake, monkeypatch, retries=2).complete("hi")
    assert not reply.ok and "after 3 attempts" in reply.error and reply.meta["retryable"]
    assert len(fake.requests) == 3  # bounded: 1 + 2 retries
    assert "sk-test-secret-123" not in reply.error
    fake.requests.clear()
    fake.script = [(400, "bad request", 0.0)]
    reply = await _expert(fake, monkeypatch).complete("hi")
    assert not reply.ok and len(fake.requests) == 1  # a client error is final: no retry


async def test_timeout_is_returned_within_the_limit(fake, monkeypatch):
    fake.script = [(200, "late", 3.0)]
    start = time.perf_counter()
    reply = await _expert(fake, monkeypatch, timeout_s=0.3).complete("hi")
    assert not reply.ok and reply.meta.get("timeout") and "timed out" in reply.error
    assert time.perf_counter() - start < 2.0


async def test_missing_key_is_a_clear_error(fake, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    expert = OpenAIExpert("mini", "gpt-5-mini", PriceTable(), base_url=fake.url, api_key_env="NO_SUCH_KEY_VAR")
    reply = await expert.complete("hi")
    assert not reply.ok and "NO_SUCH_KEY_VAR" in reply.error and not fake.requests


async def test_answer_tool_over_a_real_api_expert(fake, monkeypatch):
    fake.script = [(200, "Reasoning...\nSo the result is \\boxed{\\frac{1}{2}}", 0.0)]
    expert = _expert(fake, monkeypatch)
    tool = AnswerTool({"mini": expert}, {"answer-1": "mini"})
    task = Task(id="t", problem="Half of one?", answer="1/2")
    result = await tool.call({"model": "answer-1"}, ToolContext(task=task))
    assert result.ok and result.meta["answer"] == "\\frac{1}{2}" and result.meta["model"] == "mini"
    assert result.cost_usd == pytest.approx(PriceTable().cost("gpt-5-mini", 120, 30))
    assert "Half of one?" in fake.requests[0]["messages"][0]["content"]
