"""The CPU platform plugin for verl (actors/verl_plugins/cpu_platform.py, cpu_rollout.py): it registers with verl's
own plugin points, and its line-by-line patches refuse any verl but the one they were written against. Each check
runs in a fresh interpreter: the patches are process-wide by design (verl's workers load the module at start-up).
The end-to-end runs of verl's trainer through it: tests/bench/test_nodes.py (two nodes), verl/test_rl_control.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("verl")


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)


@pytest.mark.verl_cpu  # a fresh interpreter importing verl: make test-verl-cpu
def test_registers_platform_rollout_and_patches():
    r = run("""
import os
os.environ['VERL_PLATFORM'] = 'cpu'
import actors.verl_plugins.cpu_platform as p
from verl.plugin.platform import get_platform
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutReplicaRegistry
from verl.workers.engine.base import EngineRegistry
import torch, torch.distributed.fsdp as fsdp
plat = get_platform()
assert type(plat).__name__ == 'PlatformCPU' and plat.communication_backend_name() == 'gloo'
assert plat.ray_resource_name() == 'GPU' and plat.current_device() == torch.device('cpu')
assert plat.device_module.get_device_name() == 'CPU' and plat.device_module.memory_allocated() == 0
assert RolloutReplicaRegistry.get('cpuhf').__name__ == 'CPUHFReplica'
assert get_rollout_class('cpuhf', 'async').__name__ == 'CPUHFServerAdapter'
import verl.workers.engine.fsdp.transformer_impl  # registers the FSDP engines (cuda/npu only)
assert EngineRegistry.get_engine_cls('language_model', 'fsdp') is not None
assert fsdp.CPUOffload(offload_params=True).offload_params is False
print('ok')
""")
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-2000:]


@pytest.mark.verl_cpu  # a fresh interpreter importing verl: make test-verl-cpu
def test_refuses_another_verl_version():
    r = run("""
import verl
verl.__version__ = '0.9.2'
import actors.verl_plugins.cpu_platform
""")
    assert r.returncode != 0 and "patches verl 0.9.1" in r.stderr and "0.9.2" in r.stderr
