"""The GPU stack's pins agree with verl's: pyproject's `gpu` extra and cluster/ray-cluster.yaml's setup_commands pin
each package verl 0.9.1's `vllm` extra pins (read from verl's installed metadata) at verl's version, and the cupy
build is the one verl names. A mismatch would let `pip install -e .[gpu]` or `ray up` resolve a vLLM/torch pair
verl was not released with."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parents[2]
PIN = re.compile(r"(?<![\w.=-])([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]\s]*\])?==([A-Za-z0-9][A-Za-z0-9.+!_-]*)")


def exact(req: Requirement) -> str | None:
    """The version of an `==` pin, else None."""
    pins = [s.version for s in req.specifier if s.operator == "=="]
    return pins[0] if len(pins) == 1 else None


def verl_requirements() -> list[Requirement]:
    return [Requirement(r) for r in importlib.metadata.requires("verl") or []]


def in_extra(req: Requirement, extra: str) -> bool:
    """True when the requirement belongs to `extra` (not to the base install)."""
    return req.marker is not None and req.marker.evaluate({"extra": extra}) and not req.marker.evaluate({"extra": ""})


def verl_vllm_pins() -> dict[str, str]:
    pins = {canonicalize_name(r.name): exact(r) for r in verl_requirements() if in_extra(r, "vllm")}
    return {name: v for name, v in pins.items() if v}


def gpu_extra() -> dict[str, Requirement]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    reqs = [Requirement(r) for r in data["project"]["optional-dependencies"]["gpu"]]
    return {canonicalize_name(r.name): r for r in reqs}


def setup_pins() -> dict[str, set[str]]:
    """Every `pkg==version` token in cluster/ray-cluster.yaml's setup commands (every node's, the head's and the
    workers'): name -> versions seen."""
    cfg = yaml.safe_load((REPO / "cluster" / "ray-cluster.yaml").read_text())
    found: dict[str, set[str]] = {}
    commands = [c for key in ("setup_commands", "head_setup_commands", "worker_setup_commands") for c in cfg.get(key) or []]
    for command in commands:
        for name, version in PIN.findall(str(command)):
            found.setdefault(canonicalize_name(name), set()).add(version)
    return found


def test_verl_metadata_pins_the_vllm_set():
    pins = verl_vllm_pins()
    assert {"vllm", "torch", "transformers"} <= set(pins), pins  # the parsing found verl's vllm extra


def test_gpu_extra_pins_exactly_verls_vllm_set():
    extra = gpu_extra()
    wrong = {}
    for name, version in verl_vllm_pins().items():
        ours = exact(extra[name]) if name in extra else None
        if ours != version:
            wrong[name] = (str(extra.get(name, "missing")), f"verl: =={version}")
    assert not wrong, f"pyproject's gpu extra differs from verl's vllm extra: {wrong}"
    assert exact(extra["flash-attn"]) == "2.8.3"


def test_gpu_extra_cupy_is_the_build_verl_names():
    verl_cupy = [r for r in verl_requirements() if canonicalize_name(r.name).startswith("cupy-")]
    assert verl_cupy, "verl's metadata names no cupy (its nccl checkpoint engine imports cupy)"
    ours = [r for name, r in gpu_extra().items() if name.startswith("cupy-")]
    assert len(ours) == 1 and exact(ours[0]), f"the gpu extra needs one pinned cupy build, has {ours}"
    same = [r for r in verl_cupy if canonicalize_name(r.name) == canonicalize_name(ours[0].name)]
    assert same, f"gpu extra pins {ours[0]}, verl names {[str(r) for r in verl_cupy]}"
    assert all(r.specifier.contains(exact(ours[0])) for r in same), f"{ours[0]} vs {[str(r) for r in same]}"


def test_ray_cluster_setup_installs_the_same_versions():
    found = setup_pins()
    assert {"torch", "vllm", "flash-attn"} <= set(found), f"setup_commands pin only {sorted(found)}"
    expected = {**{n: exact(r) for n, r in gpu_extra().items() if exact(r)}, **verl_vllm_pins()}
    wrong = {n: (sorted(vs), expected[n]) for n, vs in found.items() if n in expected and vs != {expected[n]}}
    assert not wrong, f"cluster/ray-cluster.yaml setup_commands pin other versions (found, expected): {wrong}"
    cupy = sorted(n for n in found if n.startswith("cupy-"))
    ours = sorted(n for n in gpu_extra() if n.startswith("cupy-"))
    assert not cupy or cupy == ours, f"two cupy builds would clash: setup_commands {cupy}, gpu extra {ours}"
