"""Checkpoints sized to what a resume needs under HSDP: one replica group writes verl's model and optimizer shards.

verl 0.9.1's FSDPCheckpointManager (verl/utils/checkpoint/fsdp_checkpoint_manager.py) has every rank write
`model_world_size_W_rank_r.pt`, `optim_...` and `extra_state_...`. With HSDP (verl's (ddp, fsdp) mesh, h100_2x8: 2 x
8) the ranks that share an fsdp coordinate hold the same shard (gradients are all-reduced across the replicas), so
each save wrote every byte once per node: ~197 GB for Qwen3-8B's fp32 weights and Adam moments on two nodes.
Here only the ranks of replica 0 (ddp coordinate 0: ranks 0..fsdp-1, the files verl's model_merger reads) write the
model and optimizer files. The other ranks still build their state dicts (FSDP1's sharded `state_dict()` is a
collective) and skip the write. On load, a rank of replica k reads the file of the writer that holds its shard (same
fsdp coordinate, ddp 0), and its DTensors are re-homed on its own mesh: a pickled DeviceMesh carries the writer's
rank and process-group names. The extra state (lr scheduler, RNG) stays per rank: a few KB each.
FSDP2 (`strategy=fsdp2`: DTensor optimizer state too) and a one-replica mesh are left as verl writes them.
Loaded into every verl process by VERL_USE_EXTERNAL_MODULES (verl/__init__.py:49; cluster/verl/job.py sets it).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from typing import Any

import torch
from verl.utils.checkpoint import fsdp_checkpoint_manager as verl_ckpt

SHARD_FILE = re.compile(r"^(model|optim)_world_size_(\d+)_rank_(\d+)\.pt$")
_scope = threading.local()  # the replica layout of the save or load in progress on this thread


def replica_layout(model: Any) -> dict[str, Any] | None:
    """{writer: the replica-0 rank holding this rank's shard, replica: this rank's ddp coordinate, mesh}, or None
    where every rank's shard is its own (FSDP2, a one-dimensional mesh)."""
    if verl_ckpt.fsdp_version(model) != 1:
        return None
    mesh = getattr(model, "_device_mesh", None)  # FSDP1's root: the mesh verl gave it, (ddp, fsdp) for HSDP
    if mesh is None or tuple(mesh.mesh_dim_names or ()) != ("ddp", "fsdp") or mesh.mesh.shape[0] < 2:
        return None
    ddp, fsdp = mesh.get_coordinate()
    return {"writer": int(mesh.mesh[0, fsdp]), "replica": int(ddp), "mesh": mesh}


def rehome(state: dict[str, Any], mesh: Any) -> dict[str, Any]:
    """The writer's DTensors as this rank's: the same local shard (same fsdp coordinate) on this rank's mesh."""
    from torch.distributed.tensor import DTensor

    return {k: DTensor.from_local(v.to_local(), device_mesh=mesh, placements=v.placements, run_check=False,
                                  shape=v.shape, stride=v.stride()) if isinstance(v, DTensor) else v
            for k, v in state.items()}


class ReplicaFiles:
    """`torch` as verl's checkpoint module sees it: shard files of replicas > 0 are not written, and are read from
    the writer of the same shard. Everything else is torch itself."""

    def __init__(self, real: Any):
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def save(self, obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        layout = getattr(_scope, "layout", None)
        shard = isinstance(f, str) and SHARD_FILE.match(os.path.basename(f))
        if layout and layout["replica"] > 0 and shard:
            say(f"left {os.path.basename(f)} to rank {layout['writer']} (the same shard)")
            return None  # replica 0's rank of this fsdp coordinate writes the same bytes
        out = self._real.save(obj, f, *args, **kwargs)
        if layout and shard:
            say(f"wrote {f}")
        return out

    def load(self, f: Any, *args: Any, **kwargs: Any) -> Any:
        layout = getattr(_scope, "layout", None)
        found = SHARD_FILE.match(os.path.basename(f)) if layout and isinstance(f, str) else None
        if not found or layout["replica"] == 0:
            return self._real.load(f, *args, **kwargs)
        kind, world = found.group(1), found.group(2)
        path = os.path.join(os.path.dirname(f), f"{kind}_world_size_{world}_rank_{layout['writer']}.pt")
        say(f"read {path} (written by rank {layout['writer']}, replica 0)")
        obj = self._real.load(path, *args, **kwargs)
        return rehome(obj, layout["mesh"]) if kind == "model" else obj


def say(what: str) -> None:
    """One line per shard file a rank writes, leaves or reads, with its rank and node: under HSDP across nodes, the
    job's log shows each file written once and read on resume by the other node's rank (docs/cluster.md)."""
    import torch.distributed as dist

    rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    try:
        import ray

        node = ray.util.get_node_ip_address()
    except Exception:  # outside a Ray worker (a unit test's gloo ranks)
        import socket

        node = socket.gethostname()
    print(f"orchestra checkpoint: rank {rank} on {node} {what}", flush=True)


def _scoped(method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        _scope.layout = replica_layout(self.model)
        try:
            return method(self, *args, **kwargs)
        finally:
            _scope.layout = None

    wrapper._orchestra_replicas = True
    return wrapper


def install() -> None:
    """Idempotent: verl's checkpoint module gets ReplicaFiles as its `torch`, its save/load the replica layout."""
    cls = verl_ckpt.FSDPCheckpointManager
    if getattr(cls.save_checkpoint, "_orchestra_replicas", False):
        return
    verl_ckpt.torch = ReplicaFiles(torch)
    cls.save_checkpoint = _scoped(cls.save_checkpoint)
    cls.load_checkpoint = _scoped(cls.load_checkpoint)


install()
