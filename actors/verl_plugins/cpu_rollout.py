"""`cpuhf`: a verl 0.9.1 rollout backend served by our HF engine (orchestra/engine/hf.py), for verl on CPU.

verl's rollout contract has three parts, each registered through verl's own plugin points:
- a **replica** (`RolloutReplicaRegistry.register("cpuhf", ...)`, verl/workers/rollout/replica.py): starts one
  server actor per replica and exposes its handle to verl's LLM server manager and load balancer;
- the **server** (`CPUHFServer`, a named Ray actor `cpuhf_server_<replica>`): token ids in, `TokenOutput(token_ids,
  log_probs, stop_reason)` out, the same token-in/token-out call our agent loop makes of vLLM's server
  (actors/verl_plugins/agent_loop.ServerEngine); control calls (sleep, wake_up, kv-cache, abort) have nothing to
  free on a CPU and return at once;
- the **adapter** (`CPUHFServerAdapter`, `_ROLLOUT_REGISTRY[("cpuhf", "async")]`, verl/workers/rollout/base.py):
  lives in each FSDP worker (hybrid engine) and pushes the gathered weights to its replica's server after every
  update. Every rank drains verl's weight generator (it gathers shards collectively); the replica's rank 0 sends.
Modes: `sync` and `colocate_async` (hybrid engine). `separate_async` (standalone replicas) needs a checkpoint
engine that moves weights between processes without CUDA; none of verl's does, so it is refused here with a line.
Loaded by actors/verl_plugins/cpu_platform.py; nothing here runs on a GPU.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

NAME = "cpuhf"
logger = logging.getLogger(__name__)


def server_name(replica_rank: int) -> str:
    return f"{NAME}_server_{replica_rank}"


def _model_path(model_config: Any) -> str:
    get = model_config.get if hasattr(model_config, "get") else lambda k, d=None: getattr(model_config, k, d)
    return str(get("local_path", None) or get("path"))


class CPUHFServer:
    """One replica's generation server: an HF causal LM behind our batched HFEngine (KV reuse across turns)."""

    def __init__(self, model_path: str, max_batch_size: int = 32, torch_threads: int = 1):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from orchestra.engine.hf import HFEngine

        torch.set_num_threads(max(int(torch_threads), 1))
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, attn_implementation="sdpa")
        self.engine = HFEngine.from_model(model.eval(), tokenizer, max_batch_size=max_batch_size)
        self.global_steps: int | None = None
        self.weight_syncs = 0

    def ready(self) -> bool:
        return True

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str = "",
                       **_: Any) -> TokenOutput:
        from orchestra.engine import Sampling

        p = dict(sampling_params or {})
        top_k = int(p.get("top_k", 0) or 0)
        sampling = Sampling(max_tokens=int(p.get("max_tokens") or p.get("max_new_tokens") or 64),
                            temperature=float(p.get("temperature", 1.0)), top_p=float(p.get("top_p", 1.0)),
                            top_k=max(top_k, 0), stop_token_ids=[int(t) for t in p.get("stop_token_ids") or []])
        gen = await self.engine.generate(list(prompt_ids), sampling)
        return TokenOutput(token_ids=gen.token_ids, log_probs=gen.logprobs, stop_reason="completed",
                           extra_fields={"global_steps": self.global_steps})

    def load_weights(self, state_dict: dict[str, Any], global_steps: int | None) -> dict[str, int]:
        self.engine.load_weights(state_dict, version=int(global_steps or 0))
        self.weight_syncs += 1
        if global_steps is not None:
            self.global_steps = int(global_steps)
        return {"tensors": len(state_dict), "syncs": self.weight_syncs}

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = int(global_steps)

    def stats(self) -> dict[str, Any]:
        return {**self.engine.stats(), "weight_syncs": self.weight_syncs, "global_steps": self.global_steps}

    # control calls verl makes of a GPU server; a CPU server has no memory to release or requests to drain
    async def wake_up(self, *_: Any, **__: Any) -> None: ...
    async def sleep(self, *_: Any, **__: Any) -> None: ...
    async def clear_kv_cache(self, *_: Any, **__: Any) -> None: ...
    async def release_kv_cache(self, *_: Any, **__: Any) -> None: ...
    async def resume_kv_cache(self, *_: Any, **__: Any) -> None: ...
    async def abort_all_requests(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}
    async def resume_generation(self, *_: Any, **__: Any) -> None: ...
    async def wait_for_requests_to_drain(self, *_: Any, **__: Any) -> None: ...
    async def start_profile(self, *_: Any, **__: Any) -> None: ...
    async def stop_profile(self, *_: Any, **__: Any) -> None: ...


class CPUHFReplica(RolloutReplica):
    """One `CPUHFServer` per replica, started beside the hybrid workers (it holds no logical GPU)."""

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank)
        cls = ray.remote(CPUHFServer).options(name=name, num_cpus=0, max_concurrency=self.max_concurrency)
        server = cls.remote(_model_path(self.model_config))
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name  # the load balancer's key; nothing connects to it over HTTP

    async def init_standalone(self) -> None:
        raise NotImplementedError(
            "rollout.name=cpuhf serves the hybrid engine (trainer_mode sync | colocate_async); separate_async needs "
            "a checkpoint engine that moves weights between CPU processes, which verl 0.9.1 lacks")

    def rollout_worker_use_gpu(self) -> bool:
        return False


class CPUHFServerAdapter(BaseRollout):
    """In each FSDP worker: forwards the trainer's weights to this replica's CPUHFServer."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1, **_: Any):
        import os

        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        per_replica = int(self.config.tensor_model_parallel_size * self.config.data_parallel_size
                          * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // per_replica if replica_rank == -1 else replica_rank
        self.is_sender = rank % per_replica == 0
        self._server: Any = None

    def _handle(self) -> Any:
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights: Any, wire_format: str = "named_tensors", global_steps: int | None = None,
                             **_: Any) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"cpuhf takes full named tensors, not {wire_format!r}")
        # every rank drains the generator: for FSDP it gathers each full tensor collectively
        state = {name: tensor.detach().to("cpu").clone() for name, tensor in weights}
        if self.is_sender:
            report = await self._handle().load_weights.remote(state, global_steps)
            logger.info("cpuhf replica %d: %d tensors synced (step %s)", self.replica_rank, report["tensors"],
                        global_steps)


def _load_replica() -> type[RolloutReplica]:
    return CPUHFReplica


RolloutReplicaRegistry.register(NAME, _load_replica)
rollout_base._ROLLOUT_REGISTRY[(NAME, "async")] = f"{__name__}.CPUHFServerAdapter"
