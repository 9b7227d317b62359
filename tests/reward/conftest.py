"""Fixtures for the reward tests: the episode builder and a fake OpenAI-compatible judge server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.helpers.episodes import build_episode


@pytest.fixture
def episode():
    return build_episode


class _FakeOpenAI(BaseHTTPRequestHandler):
    seen: list[dict] = []
    lock = threading.Lock()
    in_flight = 0
    max_in_flight = 0  # how many requests overlapped: evidence that judges run concurrently

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        cls = type(self)
        cls.seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        with cls.lock:
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        try:
            self._reply(body, prompt)
        finally:
            self._leave()

    def _reply(self, body, prompt):
        candidate = prompt.split("Candidate answer:\n", 1)[1].split("\n\n", 1)[0]
        if "boom" in candidate:
            self._leave()
            self.send_response(500)
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "internal"}}')
            return
        time.sleep(1.0 if "slow" in candidate else 0.1)
        text = ("It names the same city.\nVERDICT: CORRECT" if "paris" in candidate.lower()
                else "Different answer.\nVERDICT: INCORRECT" if "london" in candidate.lower() else "hmm, unsure")
        data = json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text}}],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
        self._leave()  # before the client can see the reply: it may send its next request at once
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _leave(self):
        cls = type(self)
        with cls.lock:
            if not getattr(self, "_left", False):
                cls.in_flight -= 1
                self._left = True


@pytest.fixture
def fake_openai():
    # A fresh handler class per test: a deliberately slow reply of an earlier test may still be running and
    # must not count as in flight here.
    handler = type("FakeOpenAI", (_FakeOpenAI,), {"seen": [], "in_flight": 0, "max_in_flight": 0,
                                                  "lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads, server.block_on_close = True, False  # don't wait out the deliberately slow reply
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler.seen, handler
    server.shutdown()
    server.server_close()
