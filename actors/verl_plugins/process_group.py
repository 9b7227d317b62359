"""The trainer's process-group timeout for verl 0.9.1: `verl.nccl_timeout_s`, for every group created without one.

Where verl creates groups without a timeout (read from verl 0.9.1 and torch.distributed):
- its workers' world group: `initialize_global_process_group_ray(timeout_second=None)` (verl/workers/
  engine_workers.py:89; verl/utils/distributed.py), backend "cpu:gloo,cuda:nccl";
- FSDP's groups: verl's `create_device_mesh` (verl/workers/engine/fsdp/utils.py) builds a (ddp, fsdp) DeviceMesh
  for HSDP, and DeviceMesh creates each dimension's sub-groups with `timeout=None` (torch/distributed/
  device_mesh.py `_init_one_process_group`: `new_group` or `split_group`); FSDP1's own `new_subgroups` likewise.
torch fills every one of them from `distributed_c10d._get_default_timeout(backend)`: 30 minutes for verl's
"cpu:gloo,cuda:nccl" string (it is not `Backend.NCCL`, whose default is 10), whatever the world group was given.
`actor_rollout_ref.nccl_timeout` is read only by the critic's config (verl/workers/config/critic.py:173). So this
module replaces `_get_default_timeout`, the one function all of them ask: a group created without a timeout gets
ORCHESTRA_PG_TIMEOUT_S; an explicit timeout is left as given. Loaded into every verl process by
`VERL_USE_EXTERNAL_MODULES` (verl/__init__.py:49; cluster/verl/job.py sets it with ORCHESTRA_PG_TIMEOUT_S).
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta
from typing import Any

import torch.distributed.distributed_c10d as c10d

ENV = "ORCHESTRA_PG_TIMEOUT_S"


def default_timeout() -> timedelta | None:
    value = os.environ.get(ENV, "")
    return timedelta(seconds=float(value)) if value else None


def _with_timeout(torch_default: Any) -> Any:
    @functools.wraps(torch_default)
    def wrapper(backend: Any) -> timedelta:
        # read at each call: the env var may be set after this module was imported (the driver sets it first)
        ours = default_timeout()
        return ours if ours is not None else torch_default(backend)

    wrapper._orchestra_timeout = True
    return wrapper


def install() -> None:
    """Idempotent: replaces torch's default-timeout lookup once per process. Every creator (init_process_group,
    new_group, split_group, new_subgroups) looks it up in the module's globals at call time."""
    if not getattr(c10d._get_default_timeout, "_orchestra_timeout", False):
        c10d._get_default_timeout = _with_timeout(c10d._get_default_timeout)


install()
