"""RemoteEngine against a fake vLLM completions server on 127.0.0.1, and the tied-head re-tie (no vLLM needed:
tests/cluster/test_vllm_cpu.py runs the real one)."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from orchestra.engine import Sampling
from orchestra.engine.remote import RemoteEngine, RemoteEngineError
from orchestra.engine.vllm_ext import retie_output_layer
from tests.helpers.fake_openai import send_json


class FakeVLLM:
    """POST /v1/completions: generates the prompt's last ids reversed (stopping at a stop id), log-prob -0.5 each;
    a prompt longer than 100 ids is refused as vLLM refuses one beyond its context. Dev endpoints when `dev`."""

    def __init__(self, dev: bool = True, ids_field: bool = True):
        self.requests: list[tuple[str, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.requests.append((self.path, body))
                if self.path == "/v1/completions":
                    status, payload = outer.complete(body, ids_field)
                elif self.path in ("/collective_rpc", "/reset_prefix_cache") and dev:
                    status, payload = 200, {"results": ["tied"]} if self.path == "/collective_rpc" else {}
                else:
                    status, payload = 404, {"detail": "Not Found"}
                send_json(self, status, payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @staticmethod
    def complete(body: dict, ids_field: bool) -> tuple[int, dict]:
        prompt = body["prompt"]
        if len(prompt) > 100:
            return 400, {"error": {"message": "This model's maximum context length is 100 tokens", "type": "x"}}
        ids: list[int] = []
        for t in reversed(prompt):
            ids.append(t)
            if t in body.get("stop_token_ids", []) or len(ids) >= body["max_tokens"]:
                break
        reason = "stop" if ids[-1] in body.get("stop_token_ids", []) else "length"
        choice = {"index": 0, "text": "", "finish_reason": reason,
                  "logprobs": {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": [-0.5] * len(ids),
                               "top_logprobs": None, "text_offset": [0] * len(ids)}}
        if ids_field:
            choice["token_ids"] = ids
        return 200, {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": body["model"],
                     "choices": [choice], "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids),
                                                    "total_tokens": len(prompt) + len(ids)}}

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def fake():
    f = FakeVLLM()
    yield f
    f.close()


def test_generate_sends_token_ids_and_reads_ids_and_logprobs(fake):
    eng = RemoteEngine(fake.url, "tiny")
    g = asyncio.run(eng.generate([9, 8, 1, 7, 6], Sampling(max_tokens=10, temperature=0.0, top_k=0,
                                                           stop_token_ids=[1, 2], seed=3)))
    assert (g.token_ids, g.logprobs, g.finish_reason) == ([6, 7, 1], [-0.5] * 3, "stop")
    path, body = fake.requests[-1]
    assert path == "/v1/completions" and body["prompt"] == [9, 8, 1, 7, 6] and body["model"] == "tiny"
    assert body["return_token_ids"] is True and body["stop_token_ids"] == [1, 2] and body["top_k"] == -1
    assert body["seed"] == 3 and body["temperature"] == 0.0
    g = asyncio.run(eng.generate([5, 4, 3], Sampling(max_tokens=2)))  # a second event loop: a new client
    assert (g.token_ids, g.finish_reason) == ([3, 4], "length")


def test_token_id_strings_when_the_server_sends_no_ids_field():
    f = FakeVLLM(ids_field=False)
    try:
        g = asyncio.run(RemoteEngine(f.url, "tiny").generate([4, 3], Sampling(max_tokens=5)))
        assert g.token_ids == [3, 4]
    finally:
        f.close()


def test_context_overflow_ends_the_turn_as_length_and_other_errors_name_the_server(fake):
    eng = RemoteEngine(fake.url, "tiny")
    g = asyncio.run(eng.generate(list(range(3, 200)), Sampling(max_tokens=5)))
    assert (g.token_ids, g.finish_reason) == ([], "length")
    dead = RemoteEngine("http://127.0.0.1:9/v1", "tiny", timeout_s=2, max_retries=0)
    with pytest.raises(RemoteEngineError, match="127.0.0.1:9"):
        asyncio.run(dead.generate([3], Sampling(max_tokens=5)))


def test_config_errors_are_clear(monkeypatch):
    with pytest.raises(ValueError, match="engine.base_url"):
        RemoteEngine("", "tiny")
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ValueError, match="NO_SUCH_KEY_VAR"):
        RemoteEngine("http://127.0.0.1:1/v1", "tiny", api_key_env="NO_SUCH_KEY_VAR")


def test_load_weights_saves_tied_storage_once_and_reloads_in_place(fake, tmp_path):
    from safetensors.torch import load_file

    emb = torch.randn(8, 4)
    sd = {"model.embed_tokens.weight": emb, "lm_head.weight": emb, "model.norm.weight": torch.ones(4)}
    eng = RemoteEngine(fake.url, "tiny", weights_dir=str(tmp_path))
    eng.load_weights(sd, 3)
    eng.load_weights(sd, 4)
    calls = [(p, b) for p, b in fake.requests if p != "/v1/completions"]
    assert [p for p, _ in calls] == ["/collective_rpc", "/reset_prefix_cache"] * 2
    rpc = calls[-2][1]
    assert rpc["method"] == "orchestra_reload" and rpc["kwargs"]["weights_path"] == str((tmp_path / "v4").resolve())
    assert [p.name for p in tmp_path.iterdir()] == ["v4"]  # the older version is removed once read
    saved = load_file(str(tmp_path / "v4" / "model.safetensors"))
    assert set(saved) == {"model.embed_tokens.weight", "model.norm.weight"} and torch.equal(
        saved["model.embed_tokens.weight"], emb)
    assert eng.version == 4
    with pytest.raises(ValueError, match="full weights"):
        eng.load_weights(sd, 5, partial=True)


def test_load_weights_without_dev_mode_says_how_to_start_the_server(tmp_path):
    f = FakeVLLM(dev=False)
    try:
        with pytest.raises(RemoteEngineError, match="VLLM_SERVER_DEV_MODE=1.*WeightReload"):
            RemoteEngine(f.url, "tiny", weights_dir=str(tmp_path)).load_weights({"w": torch.ones(2)}, 1)
    finally:
        f.close()


class _Cfg:
    def __init__(self, tied: bool):
        self.tie_word_embeddings = tied


class _Model(torch.nn.Module):
    def __init__(self, tied: bool):
        super().__init__()
        self.config = _Cfg(tied)
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(6, 3)
        self.lm_head = torch.nn.Linear(3, 6, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight


def test_retie_points_the_head_at_the_reloaded_embedding_and_repacks_it():
    m = _Model(tied=True)
    m.model.embed_tokens.weight = torch.nn.Parameter(torch.randn(6, 3))  # a reload replaced the Parameter
    repacked = []
    assert retie_output_layer(m, repacked.append) is True
    assert m.lm_head.weight is m.model.embed_tokens.weight and repacked == [m.lm_head]
    assert retie_output_layer(_Model(tied=False)) is False


def test_retie_refuses_a_head_that_still_differs():
    m = _Model(tied=True)

    def bad_repack(layer):  # a platform hook that leaves the head on other weights
        layer.weight = torch.nn.Parameter(torch.zeros(6, 3))

    with pytest.raises(RuntimeError, match="still differs"):
        retie_output_layer(m, bad_repack)
