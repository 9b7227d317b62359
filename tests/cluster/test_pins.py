"""The GPU stack's pins agree with verl's: pyproject's `gpu` extra, cluster/ray-cluster.yaml's setup_commands and the
cluster image (cluster/image/Dockerfile) pin each package verl 0.9.1's `vllm` extra pins (read from verl's installed
metadata) at verl's version, and the cupy build is the one verl names. A mismatch would let `pip install -e .[gpu]`,
`ray up` or the image build resolve a vLLM/torch pair verl was not released with. pyproject is the one source: the
other two are checked copies. The nodes' image and the venv share one Python, which pyproject and verl allow."""

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


DOCKERFILE = REPO / "cluster" / "image" / "Dockerfile"


def dockerfile_text() -> str:
    """The Dockerfile without its comments, continuation lines joined."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    return re.sub(r"\\\n", " ", "\n".join(lines))


def dockerfile_pins() -> dict[str, set[str]]:
    """Every `pkg==version` token of the Dockerfile's RUN instructions: name -> versions seen."""
    found: dict[str, set[str]] = {}
    for run in re.findall(r"^\s*RUN\s+(.*)$", dockerfile_text(), re.M):
        for name, version in PIN.findall(run):
            found.setdefault(canonicalize_name(name), set()).add(version)
    return found


def test_the_image_installs_what_ray_up_installs_at_pyprojects_pins():
    """One source of the pins: the image pins exactly what ray-cluster.yaml's setup commands pin (the same packages
    at the same versions), and both agree with pyproject's gpu extra and verl's metadata."""
    found = dockerfile_pins()
    assert {"torch", "vllm", "flash-attn", "cupy-cuda13x"} <= set(found), f"the Dockerfile pins only {sorted(found)}"
    assert found == setup_pins(), f"Dockerfile vs ray-cluster.yaml setup commands: {found} != {setup_pins()}"
    expected = {**{n: exact(r) for n, r in gpu_extra().items() if exact(r)}, **verl_vllm_pins()}
    assert not {n: vs for n, vs in found.items() if n in expected and vs != {expected[n]}}
    assert set(expected) - {"flash-attn"} <= set(found)  # every pin of the gpu extra (flash-attn: its own step)


def python_of_tag(image: str) -> str:
    """"rayproject/ray:2.60.0-py312-cu130" -> "3.12"."""
    m = re.search(r"-py3(\d+)\b", image)
    assert m, f"no -py3NN in the image tag {image!r}"
    return f"3.{m.group(1)}"


def venv_pythons(commands: list[str]) -> set[str]:
    """The Python versions the commands make the project's venv with (`python3.NN -m venv ...`)."""
    found = {m for c in commands for m in re.findall(r"\bpython(3\.\d+) -m venv\b", c)}
    assert not [c for c in commands if re.search(r"\bpython3? -m venv\b", c)], "a venv of an unnamed python"
    return found


def test_the_image_tags_python_is_the_venvs_and_allowed():
    """On bd00958 the nodes' image was rayproject/ray:2.60.0-py311-cu130, a tag Ray's CUDA 13 builds (Python 3.12
    only) do not make; the venv took whatever `python` the image had. Now the tag names the venv's Python, which
    pyproject's requires-python and verl's allow."""
    from packaging.specifiers import SpecifierSet

    cfg = yaml.safe_load((REPO / "cluster" / "ray-cluster.yaml").read_text())
    setup = [str(c) for key in ("setup_commands", "head_setup_commands", "worker_setup_commands") for c in cfg[key]]
    python = python_of_tag(cfg["docker"]["image"])
    assert venv_pythons(setup) == {python}
    (base,) = re.findall(r"^ARG RAY_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    assert base == cfg["docker"]["image"] and venv_pythons(re.findall(r"^RUN (.*)$", dockerfile_text(), re.M)) == {python}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert SpecifierSet(project["requires-python"]).contains(python), project["requires-python"]
    assert SpecifierSet(importlib.metadata.metadata("verl")["Requires-Python"]).contains(python)
    assert python == "3.12" and cfg["docker"]["image"].endswith("-cu130")  # Ray's one CUDA 13 Python
