"""bench/rl_control_verl.py at toy sizes: the positive control trained through verl 0.9.1's own trainer on CPU, then
both policies scored by the local trainer's held-out evaluation. Minutes: marked `verl_cpu`, run by `make
test-verl-cpu` (.ci/run), beside tests/cluster/verl/test_watchdog.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl_cpu

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(900)
def test_the_positive_control_bench_trains_through_verl_and_scores_both_policies(tmp_path):
    """bench/rl_control_verl.py at toy sizes: experiment=adaptive_control through verl's trainer (a zoo without
    cpu_tiny's `search`: on 4b85e54 every episode after the first ran cpu_tiny's config and looked up `tool:search`),
    then the warm start and the merged policy scored by the local trainer's held-out evaluation."""
    r = subprocess.run([sys.executable, "bench/rl_control_verl.py", "seeds=1", f"root={tmp_path}", "algo.steps=1",
                        "sft.steps=4", "data.n_train=8", "data.n_heldout=4", "algo.group_size=2",
                        "algo.prompts_per_step=1", "checkpoint.every_steps=1"], cwd=ROOT, capture_output=True,
                       text=True, timeout=880, env={**os.environ, "PYTHONPATH": str(ROOT)})
    log = (tmp_path / "v0.log").read_text(errors="replace") if (tmp_path / "v0.log").is_file() else ""
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:] + log[-3000:]
    figures = dict(re.findall(r"^RESULT (\w+)=(\S+)$", r.stdout, re.M))
    print("\n".join(f"RESULT {k}={v}" for k, v in figures.items()))
    assert figures["verl_rl_control_steps"] == "1.0000", log[-3000:]
    assert {"verl_rl_control_escalation_gain", "verl_rl_control_gain_ci_low"} <= set(figures)
    assert "Failed to look up actor" not in log  # the agent loop kept the job's tools
    for part in ("eval_sft", "eval_rl"):  # both policies held out under the three presets
        assert set(json.loads((tmp_path / "v0" / part / "summary.json").read_text())["after_rl"]["by_pref"]) == {
            "accuracy-first", "balanced", "cost-first"}
