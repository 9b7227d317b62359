"""verl 0.9.1's own V1 trainer on CPU, end to end, through verl's plugin points (bench/verl_cpu.py): the tiny
policy warm-started as stage 1, FSDP world size 2 over gloo, our agent loop with tool-server actors and the scalar
reward; 2 GRPO steps in `sync` with a checkpoint each, a rerun that resumes at step 3, 2 steps in
`colocate_async`, and the merged weights answering through our Serve app. Minutes, not seconds: marked `verl_cpu`,
run by `make test-verl-cpu` (.ci/run's second step), not by `make test`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl_cpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(1500)
def test_verls_trainer_runs_resumes_and_serves_on_cpu(tmp_path):
    r = subprocess.run([sys.executable, "bench/verl_cpu.py", "--out", str(tmp_path / "bench")], cwd=ROOT,
                       capture_output=True, text=True, timeout=1400)
    figures = dict(re.findall(r"^RESULT (\w+)=(\S+)$", r.stdout, re.M))
    logs = "\n".join(f"{p.name}: ...{p.read_text(errors='replace')[-3000:]}" for p in (tmp_path / "bench").glob("*.log"))
    assert r.returncode == 0, r.stdout + r.stderr[-3000:] + logs
    assert int(figures["verl_cpu_steps"]) >= 2, logs
    assert figures["verl_cpu_world_size"] == "2"  # two FSDP ranks saved shards: real sharding and gathering
    assert float(figures["verl_cpu_grad_norm"]) > 0  # rewards differed in a group: the update moved the weights
    assert figures["verl_cpu_resumed"] == "1", logs
    assert int(figures["verl_cpu_colocate_steps"]) >= 2, logs
    assert figures["verl_cpu_served"] == "1", r.stdout
    sync = tmp_path / "bench" / "sync"
    for step in (1, 2, 3):
        assert list((sync / "checkpoints" / f"global_step_{step}" / "actor").glob("model_world_size_2_rank_*.pt"))
    assert (sync / "hf" / "model.safetensors").is_file() and (sync / "hf" / "orchestra_config.yaml").is_file()
    sync_log = (tmp_path / "bench" / "sync.log").read_text(errors="replace")
    assert "Failed to look up actor" not in sync_log  # the tool servers lived through the job
