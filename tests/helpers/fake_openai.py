"""A fake OpenAI-compatible chat server on 127.0.0.1 for the user simulator and expert tests.

`FakeOpenAI(reply_fn)` serves POST /v1/chat/completions in a background thread; `reply_fn(messages) -> str`
picks the assistant text. Requests are recorded for assertions. Usage is reported so cost paths run."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, reply_fn):
        self.reply_fn, self.requests = reply_fn, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append(body)
                text = outer.reply_fn(body.get("messages", []))
                payload = {"id": f"chatcmpl-{len(outer.requests)}", "object": "chat.completion",
                           "created": int(time.time()), "model": body.get("model", "fake"),
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text}}],
                           "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}}
                send_json(self, 200, payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: dict) -> None:
    """Answer an http.server request with a JSON body (the fake servers' one response path)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
