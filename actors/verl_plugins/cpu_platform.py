"""verl 0.9.1 on CPU: a `cpu` platform for verl's PlatformRegistry and the few patches its workers need there.

Loaded into every verl process by `VERL_USE_EXTERNAL_MODULES=actors.verl_plugins.cpu_platform` (verl/__init__.py:49
imports it once verl itself is importable) with `VERL_PLATFORM=cpu` (platform_manager._detect_platform_name); the
verl launcher sets both in the Ray runtime_env when `verl.platform=cpu` (cluster/verl/job.py). It also registers the
`cpuhf` rollout (actors/verl_plugins/cpu_rollout.py), so one env var brings the whole CPU path; in processes of
verl's own vLLM rollout (`verl.rollout=vllm`) it also loads actors/verl_plugins/cpu_vllm.py.

Why: CI has no GPU, and verl's own trainer (V1 PPOTrainer, FSDP actor over gloo, TransferQueue, agent-loop
workers, checkpoint/resume) is the code the GPU path runs. With this module that code runs here, so only the CUDA
platform, NCCL and vLLM stay untested. Resources: the platform answers Ray resource "GPU", and the launcher
declares logical GPUs (`ray.init(num_gpus=N)`): verl's resource check counts only "GPU"/"NPU"
(single_controller/ray/base.py:228-231). Ray sets CUDA_VISIBLE_DEVICES for those, which CPU torch ignores.

Each patch below names the verl (or torch) line it works around. They target verl 0.9.1 exactly:
`install_patches` refuses any other version, so an upgrade fails loudly instead of half-working.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import types
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

VERL_VERSION = "0.9.1"  # the version every patch below was written against
PLATFORM = "cpu"


def _zero(*_: Any, **__: Any) -> int:
    return 0


def _none(*_: Any, **__: Any) -> None:
    return None


class _CPUDeviceModule(types.ModuleType):
    """What verl calls on `get_torch_device()` (torch.cuda elsewhere), answered for the CPU: memory figures 0,
    cache/sync calls no-ops, RNG state the CPU generator's, streams torch.cpu's."""

    def __init__(self) -> None:
        super().__init__("orchestra_cpu_device")
        self.is_available = lambda: True
        self.device_count = lambda: 1
        self.current_device = lambda: 0
        self.set_device = _none
        self.synchronize = _none
        self.empty_cache = _none
        self.ipc_collect = _none
        self.set_per_process_memory_fraction = _none
        self.memory_allocated = self.memory_reserved = _zero
        self.max_memory_allocated = self.max_memory_reserved = _zero
        self.reset_peak_memory_stats = _none
        self.mem_get_info = lambda *_: (0, 0)
        self.get_rng_state = lambda *_: torch.get_rng_state()
        self.set_rng_state = lambda state, *_: torch.set_rng_state(state)
        self.manual_seed = self.manual_seed_all = torch.manual_seed
        # utils/flops_counter.py:76 special-cases `is torch.cpu`; this shim is not, so it names the device itself
        self.get_device_name = lambda *_: "CPU"
        self.Stream, self.Event, self.stream = torch.cpu.Stream, torch.cpu.Event, torch.cpu.stream
        self.current_stream = torch.cpu.current_stream


DEVICE_MODULE = _CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM)
class PlatformCPU(PlatformBase):
    """verl's platform contract for a CPU-only host: gloo for collectives, logical Ray "GPU"s as workers."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> Any:
        # FSDP(device_id=...) (workers/engine/fsdp/transformer_impl.py:441): an int means "accelerator N" and
        # fails without one; a torch.device("cpu") is accepted by every use verl makes of it on this path.
        return torch.device("cpu")

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # what Ray sets for the logical GPUs; CPU torch ignores it

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def rollout_env_vars(self) -> dict[str, str]:
        """vLLM's engine processes (verl.rollout=vllm; vllm_async_server.py:1374): its CPU backend's settings."""
        from actors.verl_plugins.cpu_vllm import rollout_env

        return rollout_env()

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def cudart(self) -> Any:
        return None


class _ResidentCPUOffload(torch.distributed.fsdp.CPUOffload):
    """CPUOffload that never offloads: the parameters already live on the CPU."""

    def __init__(self, offload_params: bool = False):
        super().__init__(offload_params=False)


def _dedupe_backend(init: Any) -> Any:
    @functools.wraps(init)
    def wrapper(*args: Any, backend: Any = None, **kwargs: Any) -> Any:
        if isinstance(backend, str) and backend.count("cpu:") > 1:
            backend = "gloo"
        return init(*args, backend=backend, **kwargs)

    return wrapper


_installed = False


def install_patches() -> None:
    """Apply the patches once per process (idempotent). Refuses a verl other than VERL_VERSION."""
    global _installed
    if _installed:
        return
    import verl

    if verl.__version__ != VERL_VERSION:
        raise RuntimeError(f"actors/verl_plugins/cpu_platform.py patches verl {VERL_VERSION} line by line; this is "
                           f"verl {verl.__version__}: re-check each patch against the new source, then update "
                           "VERL_VERSION")
    import torch.distributed.fsdp._init_utils as fsdp_init
    from verl.utils import fsdp_utils
    from verl.workers.engine import base as engine_base
    from verl.workers.engine.fsdp import transformer_impl

    # verl/utils/distributed.py:63 and :89 build "cpu:gloo,{device}:{backend}" = "cpu:gloo,cpu:gloo" here, which
    # torch rejects ("Duplicate device type cpu"): plain "gloo" is what that string means on a CPU.
    if not getattr(torch.distributed.init_process_group, "_orchestra_cpu", False):
        torch.distributed.init_process_group = _dedupe_backend(torch.distributed.init_process_group)
        torch.distributed.init_process_group._orchestra_cpu = True

    # verl/workers/engine/fsdp/transformer_impl.py:1143, :1594 register the FSDP engines for cuda/npu only, and
    # engine/base.py:426 finds none for "cpu": look up the cuda entry (its code is device-agnostic on this path).
    get_engine_cls = engine_base.EngineRegistry.get_engine_cls.__func__

    def _get_engine_cls(cls: Any, model_type: str, backend: str) -> Any:
        registry = cls._engines.get(model_type, {}).get(backend, {})
        if "cpu" not in registry and ("cpu", "cpu") not in registry:
            entry = registry.get(("cuda", "nvidia")) or registry.get("cuda")
            if entry is not None:
                return entry
        return get_engine_cls(cls, model_type, backend)

    engine_base.EngineRegistry.get_engine_cls = classmethod(_get_engine_cls)

    # transformer_impl.py:443 passes sync_module_states=True; torch's fsdp/_init_utils.py:1170 then refuses CPU
    # parameters, although the gloo broadcast it guards works on them.
    fsdp_init._check_module_states_for_sync_module_states = _none

    # utils/fsdp_utils.py:229 moves FSDP1 parameters to torch.device(f"{device_name}:{device_id}") = "cpu:cpu"
    # (called by transformer_impl.py:860-991 at every weight sync / offload): they already are on the CPU.
    fsdp_utils.load_fsdp_model_to_gpu = _none
    transformer_impl.load_fsdp_model_to_gpu = _none

    # transformer_impl.py:433 forces CPUOffload(offload_params=True) on the forward-only reference model; torch's
    # _flat_param.py:1260 then pins memory, which needs an accelerator. The parameters are on the CPU already.
    # (transformer_impl.py:387 imports the name inside the function, so the package attribute is replaced.)
    torch.distributed.fsdp.CPUOffload = _ResidentCPUOffload

    _installed = True


install_patches()
from actors.verl_plugins import cpu_rollout  # noqa: E402,F401  registers the `cpuhf` rollout with verl

if "vllm" in sys.modules:  # a process of verl's vLLM rollout (verl.rollout=vllm): vLLM's CPU build under verl
    from actors.verl_plugins import cpu_vllm  # noqa: E402,F401
