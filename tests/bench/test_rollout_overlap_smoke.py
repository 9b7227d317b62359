"""bench/rollout_overlap.py at tiny sizes: it completes and prints its RESULT lines (it crashed for weeks unseen,
`'EpisodeResult' object is not subscriptable`, once rollout results became typed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rollout_overlap_smoke_prints_its_figures():
    r = subprocess.run([sys.executable, "bench/rollout_overlap.py", "--episodes", "4", "--singles", "1",
                        "--repeats", "1", "--latency", "0.02"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    figures = dict(re.findall(r"^RESULT (\w+)=(\S+)$", r.stdout, re.M))
    assert {"rollout_overlap", "speedup_vs_concurrency2"} <= set(figures), r.stdout[-2000:]
