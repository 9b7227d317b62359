"""The cluster image (cluster/image/Dockerfile) is what the KubeRay manifests run and what the cluster expects: it
cannot be built here (no docker engine), so this checks what can be read: its stages and base, where it puts the
project and the venv, that its build context keeps secrets out and the project in, that a failed flash-attn build
names itself, and that every manifest names the one image the docs build. Its pins: tests/cluster/test_pins.py."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from orchestra.config import load_config
from tests.cluster.test_manifests import CLUSTER, KUBERAY, PROJECT, load, pod_specs

REPO = CLUSTER.parent
DOCKERFILE = CLUSTER / "image" / "Dockerfile"
DOCS = REPO / "docs" / "cluster.md"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per Dockerfile instruction: comments dropped, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*(\w+)\s+(.*)$", joined, re.M)]


def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def global_args() -> dict[str, str]:
    """The ARGs declared before the first FROM, with their defaults."""
    out = {}
    for op, rest in dockerfile():
        if op == "FROM":
            break
        if op == "ARG":
            name, _, value = rest.partition("=")
            out[name] = value
    return out


def stages() -> list[tuple[str, str]]:
    """(base, name) of every FROM, build args expanded."""
    args = global_args()
    return [(re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], rest.split()[0]), rest.split()[-1])
            for op, rest in dockerfile() if op == "FROM"]


def test_two_stages_from_the_ray_up_nodes_image():
    """Stage 1 the GPU stack on the `ray up` nodes' image, stage 2 the project on top of it (the last: what is run)."""
    (base, first), (second_base, last) = stages()
    assert base == load("ray-cluster.yaml")["docker"]["image"]
    assert (first, second_base, last) == ("gpu-stack", "gpu-stack", "project")
    runs = [(i, rest) for i, (op, rest) in enumerate(dockerfile()) if op == "RUN"]
    (copy_at,) = [i for i, (op, _) in enumerate(dockerfile()) if op == "COPY"]
    flash = [i for i, rest in runs if "flash-attn==" in rest]
    torch = [i for i, rest in runs if "torch==" in rest]
    assert len(flash) == len(torch) == 1 and torch[0] < flash[0] < copy_at  # code edits never rebuild the stack


def test_installs_the_project_where_the_cluster_runs_it():
    """verl.python (the job's interpreter), the RayJob's entrypoint and KubeRay's `ray start` (from PATH) all run the
    venv the image makes; the code lies where runtime_env's working_dir local:// points."""
    python = load_config(["experiment=h100_2x8"]).verl.python
    venv = str(Path(python).parent.parent)
    ops = dockerfile()
    env = dict(rest.split("=", 1) for op, rest in ops if op == "ENV")
    assert env["VENV"] == venv and env["PATH"].split(":")[0] == f"{venv}/bin"
    assert any(op == "RUN" and "-m venv $VENV" in rest for op, rest in ops)
    (copy,) = [shlex.split(rest) for op, rest in ops if op == "COPY"]
    assert copy[-2:] == [".", PROJECT] and "--chown=1000:100" in copy  # the whole context, owned by Ray's user
    assert ("WORKDIR", PROJECT) in ops and venv.startswith(PROJECT)
    assert [rest for op, rest in ops if op == "RUN" and '-e ".[gpu]"' in rest]  # in place, with the gpu extra
    assert [rest for op, rest in ops if op == "RUN" and "bubblewrap" in rest and "libseccomp2" in rest]
    assert not [rest for op, rest in ops if op in ("ENV", "ARG") and re.search(r"(KEY|TOKEN|SECRET|PASSWORD)", rest)]


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def pattern_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern as Docker reads it (paths from the context root; `**` any number of directories)."""
    out, i = "", 0
    p = pattern.strip("/")
    while i < len(p):
        if p.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif p.startswith("**", i):
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return re.compile(out + r"\Z")


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether the context leaves `path` out: a pattern matches it or one of its parent directories."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    return any(pattern_regex(p).match(prefix) for p in patterns for prefix in prefixes)


SECRETS = [".env", "cluster/.env", ".orchestra.env", "conf/prod.env", ".env.local", ".ray/auth_token", "auth_token",
           "keys/node.pem", "tls.key", "id_rsa", "home/.ssh/id_ed25519", ".aws/credentials", ".kube/config", ".netrc"]


def test_the_build_context_copies_no_secrets_and_the_whole_project():
    """`COPY . /home/ray/orchestra` takes the context: .dockerignore must keep keys, tokens and env files out (at any
    depth) and every tracked file of the project in, or the image would lack code the manifests import."""
    patterns = dockerignore_patterns()
    assert not [p for p in patterns if p.startswith("!")]  # no re-inclusion to reason about
    kept = [s for s in SECRETS if not ignored(s, patterns)]
    assert not kept, f".dockerignore lets these into the image: {kept}"
    assert ignored(".venv/bin/python", patterns) and ignored(".git/config", patterns)  # the image makes its own venv
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    needed = [f for f in tracked if f.split("/")[0] in ("orchestra", "tools", "reward", "actors", "cluster", "conf")
              or f in ("pyproject.toml", "README.md")]
    assert len(needed) > 100
    lost = [f for f in needed if ignored(f, patterns)]
    assert not lost, f".dockerignore leaves project files out of the image: {lost[:10]}"


def test_a_failed_flash_attn_build_names_itself(tmp_path):
    """The image build stops at the flash-attn step with a line naming it and the way out, never minutes later."""
    (run,) = [rest for op, rest in dockerfile() if op == "RUN" and "flash-attn==" in rest]
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    for tool, code in (("pip", 1), ("python", 0)):  # a pip whose build fails
        (venv / "bin" / tool).write_text(f"#!/bin/sh\nexit {code}\n")
        (venv / "bin" / tool).chmod(0o755)
    env = {"VENV": str(venv), "FLASH_ATTN": "1", "PATH": os.environ["PATH"]}
    got = subprocess.run(["sh", "-c", run], env=env, capture_output=True, text=True, timeout=30)
    assert got.returncode == 1 and "orchestra: flash-attn 2.8.3 failed to build" in got.stderr, got
    assert "docs/cluster.md, 'flash-attn'" in got.stderr and "## flash-attn" in DOCS.read_text()
    (venv / "bin" / "pip").write_text("#!/bin/sh\nexit 0\n")  # built, but the import fails
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    got = subprocess.run(["sh", "-c", run], env=env, capture_output=True, text=True, timeout=30)
    assert got.returncode == 1 and "orchestra: flash-attn 2.8.3 was built but does not import" in got.stderr, got
    got = subprocess.run(["sh", "-c", run], env={**env, "FLASH_ATTN": "0"}, capture_output=True, text=True, timeout=30)
    assert got.returncode == 0, got  # the way out: the build goes on without it


IMAGE_PLACEHOLDER = "REGISTRY/orchestra:0.1.0-cu130"


@pytest.mark.parametrize("name", KUBERAY)
def test_every_manifest_runs_the_image_the_docs_build(name):
    """On bd00958 every pod ran ghcr.io/your-org/orchestra:0.1.0-gpu, which nothing in the repository built."""
    images = {c["image"] for pod in pod_specs(load(name)) for c in pod["containers"]}
    assert images == {IMAGE_PLACEHOLDER}, images
    header = (CLUSTER / name).read_text().split("\napiVersion:")[0]
    assert "cluster/image/Dockerfile" in header and IMAGE_PLACEHOLDER in header
    docs = DOCS.read_text()
    assert "docker build -f cluster/image/Dockerfile" in docs
    (replace,) = [line for line in docs.splitlines() if "sed -i" in line and IMAGE_PLACEHOLDER in line]
    assert f"cluster/kuberay/{Path(name).name}" in replace  # the docs' one command names every manifest
