"""The trainer's process-group timeout for verl 0.9.1: `verl.nccl_timeout_s`, applied where verl applies none.

verl's V1 workers create their process group with `initialize_global_process_group_ray(timeout_second=None)`
(verl/workers/engine_workers.py:89), and its `actor_rollout_ref.nccl_timeout` is read only by the critic's config
(verl/workers/config/critic.py:173). torch then uses its default, 10 minutes for NCCL: a collective that waits
longer (a rank writing its checkpoint shard to shared storage while the others sit at the next barrier) kills the
job. Loaded into every verl process by `VERL_USE_EXTERNAL_MODULES` (verl/__init__.py:49; cluster/verl_job.py sets it
with ORCHESTRA_PG_TIMEOUT_S on both platforms), this module makes a process group created without a timeout get that
one. An explicit timeout is left as given.
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta
from typing import Any

import torch.distributed

ENV = "ORCHESTRA_PG_TIMEOUT_S"


def default_timeout() -> timedelta | None:
    value = os.environ.get(ENV, "")
    return timedelta(seconds=float(value)) if value else None


def _with_timeout(init: Any) -> Any:
    @functools.wraps(init)
    def wrapper(*args: Any, timeout: timedelta | None = None, **kwargs: Any) -> Any:
        return init(*args, timeout=timeout if timeout is not None else default_timeout(), **kwargs)

    wrapper._orchestra_timeout = True
    return wrapper


def install() -> None:
    """Idempotent: wraps torch.distributed.init_process_group once per process."""
    if not getattr(torch.distributed.init_process_group, "_orchestra_timeout", False):
        torch.distributed.init_process_group = _with_timeout(torch.distributed.init_process_group)


install()
