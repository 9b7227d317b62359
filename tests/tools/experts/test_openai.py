"""OpenAIExpert against fake OpenAI-compatible servers on 127.0.0.1 started by the test: streamed replies with usage
-> cost, servers that refuse streaming or parameters, 429/500 -> bounded retries (cost counted over attempts, a
broken stream included), timeouts, missing keys, 50 concurrent calls, the budget check, and the answer tool."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from orchestra.types import Task, ToolContext
from tools.base import guarded_call
from tools.experts.base import estimate_tokens
from tools.experts.openai import OpenAIExpert, _retry_after
from tools.orchestra_tools import AnswerTool
from tools.pricing import PriceTable

DROP = 599  # script status: stream two deltas, then cut the connection mid-body


class FakeOpenAI:
    """POST /v1/chat/completions from a script of (status, reply text, delay_s); the last entry repeats.
    Streams (chunked SSE, usage in a last chunk) when asked to, as OpenAI and vLLM do. Knobs: `stream_mode`
    (sse | json: one JSON body anyway | reject: 400), `stream_usage`, `refuse` (parameters answered with a 400
    "Unsupported parameter"), `retry_after` (header on 429s)."""

    def __init__(self, usage: tuple[int, int] = (120, 30)):
        self.script: list[tuple[int, str, float]] = [(200, "ok", 0.0)]
        self.requests: list[dict] = []
        self.auth: list[str] = []
        self.stream_mode, self.stream_usage, self.refuse, self.retry_after = "sse", True, set(), ""
        self.usage = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive and chunked bodies, as real servers

            def log_message(self, *a):  # keep test output clean
                pass

            def send(self, status: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def chunk(self, event: dict | str):
                data = f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    outer.auth.append(self.headers.get("Authorization", ""))
                    i = min(len(outer.requests) - 1, len(outer.script) - 1)
                status, text, delay = outer.script[i]
                time.sleep(delay)
                try:
                    refused = [p for p in outer.refuse if p in body]
                    if refused:
                        return self.send(400, {"error": {"message": f"Unsupported parameter: '{refused[0]}' is not "
                                                         "supported with this model.", "type": "invalid_request_error"}})
                    stream = body.get("stream") and outer.stream_mode != "json"
                    if stream and outer.stream_mode == "reject":
                        return self.send(400, {"error": {"message": "streaming is not supported by this server"}})
                    if status not in (200, DROP):
                        extra = {"Retry-After": outer.retry_after} if status == 429 and outer.retry_after else None
                        return self.send(status, {"error": {"message": text, "type": "server_error"}}, extra)
                    if not stream:
                        return self.send(200, {"id": "c1", "object": "chat.completion", "created": 0,
                                               "model": body["model"], "usage": outer.usage,
                                               "choices": [{"index": 0, "finish_reason": "stop",
                                                            "message": {"role": "assistant", "content": text}}]})
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    base = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": body["model"]}
                    words = text.split(" ")
                    for j, word in enumerate(words[:2] if status == DROP else words):
                        piece = word if j == 0 else " " + word
                        self.chunk({**base, "choices": [{"index": 0, "delta": {"content": piece},
                                                         "finish_reason": None}]})
                    if status == DROP:
                        self.close_connection = True  # no terminating chunk: the client sees a broken body
                        return
                    self.chunk({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    if outer.stream_usage and (body.get("stream_options") or {}).get("include_usage"):
                        self.chunk({**base, "choices": [], "usage": outer.usage})
                    self.chunk("[DONE]")
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    self.close_connection = True

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # 50 clients connect at once

        self.server = Server(("127.0.0.1", 0), Handler)
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


COST = PriceTable().cost("gpt-5-mini", 120, 30)


async def test_streamed_reply_with_usage_gives_tokens_and_cost(fake, monkeypatch):
    fake.script = [(200, "The answer is \\boxed{42}", 0.0)]
    expert = _expert(fake, monkeypatch)
    reply = await expert.complete([{"role": "user", "content": "What is 6*7?"}], max_tokens=64)
    assert reply.ok and reply.text == "The answer is \\boxed{42}" and reply.meta["streamed"]
    assert (reply.tokens_in, reply.tokens_out) == (120, 30) and "estimated" not in reply.meta
    assert reply.cost_usd == pytest.approx(COST)
    sent = fake.requests[0]
    assert sent["model"] == "gpt-5-mini" and sent["max_completion_tokens"] == 64 and sent["stream"]
    assert sent["stream_options"] == {"include_usage": True}
    assert fake.auth[0] == "Bearer sk-test-secret-123"  # the key reached the server, from the env var
    assert expert.cost_bound(120, 64) >= reply.cost_usd


async def test_plain_and_json_answers_to_a_stream_request(fake, monkeypatch):
    fake.script = [(200, "plain reply", 0.0)]
    reply = await _expert(fake, monkeypatch, stream=False).complete("hi")
    assert reply.ok and reply.text == "plain reply" and "stream" not in fake.requests[-1]
    assert reply.cost_usd == pytest.approx(COST)
    fake.stream_mode = "json"  # asked to stream, it answers with one JSON body
    reply = await _expert(fake, monkeypatch).complete("hi")
    assert reply.ok and reply.text == "plain reply" and reply.cost_usd == pytest.approx(COST)


async def test_a_server_that_refuses_streaming_is_asked_plainly(fake, monkeypatch):
    fake.stream_mode = "reject"
    expert = _expert(fake, monkeypatch)
    reply = await expert.complete("hi")
    assert reply.ok and reply.text == "ok" and reply.meta["attempts"] == 1 and not expert.stream
    assert [bool(r.get("stream")) for r in fake.requests] == [True, False]
    await expert.complete("again")
    assert len(fake.requests) == 3  # learnt: one request per call from then on


async def test_a_stream_without_usage_is_priced_from_estimates(fake, monkeypatch):
    fake.stream_usage, fake.script = False, [(200, "forty two is the answer", 0.0)]
    reply = await _expert(fake, monkeypatch).complete("What is 6*7?")
    assert reply.ok and reply.meta["estimated"] and reply.tokens_in > 0 and reply.tokens_out > 0
    assert reply.cost_usd == pytest.approx(PriceTable().cost("gpt-5-mini", reply.tokens_in, reply.tokens_out))


async def test_refused_parameters_are_adapted_once(fake, monkeypatch):
    """OpenAI's reasoning models refuse temperature=0; older servers refuse max_completion_tokens."""
    fake.refuse = {"temperature", "max_completion_tokens"}
    expert = _expert(fake, monkeypatch)
    reply = await expert.complete("hi", max_tokens=50)
    assert reply.ok and reply.meta["attempts"] == 1
    last = fake.requests[-1]
    assert "temperature" not in last and "max_completion_tokens" not in last and last["max_tokens"] == 50
    fake.refuse = {"max_tokens"}  # adapted once only: a second refusal of the same parameter is final
    reply = await expert.complete("hi")
    assert not reply.ok and "HTTP 400" in reply.error and "max_tokens" in reply.error


async def test_429_then_success_counts_cost_over_attempts(fake, monkeypatch):
    fake.script, fake.retry_after = [(429, "slow down", 0.0), (200, "fine", 0.0)], "0"
    reply = await _expert(fake, monkeypatch).complete("hi")
    assert reply.ok and reply.text == "fine" and reply.meta["attempts"] == 2
    assert reply.cost_usd == pytest.approx(COST)  # a 429 bills nothing
    fake.requests.clear()
    fake.script = [(DROP, "partial answer that broke", 0.0), (200, "fine", 0.0)]
    msgs = [{"role": "user", "content": "hi there"}]
    reply = await _expert(fake, monkeypatch).complete(msgs, max_tokens=100)
    partial_out = estimate_tokens("partial answer") - 5
    assert reply.ok and reply.text == "fine" and reply.meta["attempts"] == 2 and reply.meta["estimated"]
    assert (reply.tokens_in, reply.tokens_out) == (estimate_tokens(msgs) + 120, partial_out + 30)
    assert reply.cost_usd == pytest.approx(PriceTable().cost("gpt-5-mini", reply.tokens_in, reply.tokens_out))
    assert reply.cost_usd > COST  # the broken stream's tokens were billed too
    # the retry asks only for what is left of max_tokens: output never exceeds what the cost bound assumed
    assert [r["max_completion_tokens"] for r in fake.requests] == [100, 100 - partial_out]


async def test_429_and_500_are_retried_then_succeed(fake, monkeypatch):
    fake.script = [(429, "slow down", 0.0), (500, "boom", 0.0), (200, "fine", 0.0)]
    reply = await _expert(fake, monkeypatch).complete("hi")
    assert reply.ok and reply.text == "fine" and reply.meta["attempts"] == 3
    assert len(fake.requests) == 3


def test_retry_after_is_read_and_capped():
    def state(after):
        resp = SimpleNamespace(headers={"retry-after": after} if after else {})
        return SimpleNamespace(attempt_number=1, outcome=SimpleNamespace(exception=lambda: SimpleNamespace(
            response=resp)))

    expert = OpenAIExpert("mini", "gpt-5-mini", PriceTable(), backoff_s=0.01, timeout_s=5.0)
    assert _retry_after(state("2").outcome.exception()) == 2.0
    assert expert._wait(state("2")) == 2.0  # the server's wait beats the short backoff
    assert expert._wait(state("120")) == 5.0  # ...up to the call's timeout
    assert expert._wait(state(None)) <= 0.01
    assert _retry_after(state("Wed, 21 Oct 2015 07:28:00 GMT").outcome.exception()) == 0.0  # a past date


async def test_persistent_errors_become_an_error_result(fake, monkeypatch):
    fake.script = [(500, "down", 0.0)]
    reply = await _expert(fake, monkeypatch, retries=2).complete("hi")
    assert not reply.ok and "after 3 attempts" in reply.error and reply.meta["retryable"]
    assert len(fake.requests) == 3  # bounded: 1 + 2 retries
    assert "sk-test-secret-123" not in reply.error and reply.cost_usd == 0.0
    fake.requests.clear()
    fake.script = [(404, "The model `gpt-5-mini` does not exist (key sk-test-secret-123)", 0.0)]
    reply = await _expert(fake, monkeypatch).complete("hi")
    assert not reply.ok and len(fake.requests) == 1  # a client error is final: no retry
    assert "does not exist" in reply.error and "sk-test-secret-123" not in reply.error  # its words, key scrubbed


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


async def test_50_concurrent_calls_all_succeed(fake, monkeypatch):
    fake.script = [(200, "The answer is \\boxed{7}", 0.05)]
    expert = _expert(fake, monkeypatch)
    replies = await asyncio.wait_for(asyncio.gather(*[expert.complete(f"q{i}") for i in range(50)]), timeout=60)
    assert [r.error for r in replies if not r.ok] == [] and len(fake.requests) == 50
    assert sum(r.cost_usd for r in replies) == pytest.approx(50 * COST)


def _answer_tool(expert) -> AnswerTool:
    return AnswerTool({"mini": expert}, {"answer-1": "mini"})


async def test_the_budget_check_refuses_before_any_request(fake, monkeypatch):
    tool, task = _answer_tool(_expert(fake, monkeypatch, max_tokens=1000)), Task(id="t", problem="6*7?", answer="42")
    bound = tool.cost_bound({"model": "answer-1"}, ToolContext(task=task))
    refused = await guarded_call(tool, {"model": "answer-1"}, ToolContext(task=task, budget_usd_left=bound / 2))
    assert refused.refused and "budget exhausted" in refused.error and not fake.requests
    paid = await guarded_call(tool, {"model": "answer-1"}, ToolContext(task=task, budget_usd_left=bound))
    assert paid.ok and 0 < paid.cost_usd <= bound and len(fake.requests) == 1


async def test_answer_tool_over_a_real_api_expert(fake, monkeypatch):
    fake.script = [(200, "Reasoning...\nSo the result is \\boxed{\\frac{1}{2}}", 0.0)]
    tool = _answer_tool(_expert(fake, monkeypatch))
    task = Task(id="t", problem="Half of one?", answer="1/2")
    result = await tool.call({"model": "answer-1"}, ToolContext(task=task))
    assert result.ok and result.meta["answer"] == "\\frac{1}{2}" and result.meta["model"] == "mini"
    assert result.cost_usd == pytest.approx(COST)
    assert "Half of one?" in fake.requests[0]["messages"][0]["content"]


def test_the_requested_name_drops_only_a_provider_prefix():
    together = "together:meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo"
    assert OpenAIExpert("l8", together, PriceTable()).request_model == together.split(":", 1)[1]
    ollama = OpenAIExpert("l3", "llama3:8b", PriceTable({"llama3:8b": (0.0, 0.0)}))
    assert ollama.request_model == "llama3:8b"  # a served name's own colon stays
