"""bench/gpu_smoke.{sh,py}, the CUDA check for a bare GPU box: it skips cleanly without CUDA or a package, its
`--device cpu --smoke` mode runs the whole path (engine with KV reuse, full and LoRA learner steps) and prints
every RESULT line, so does its warm-start memory check (`--warm-start-8b`, with h100_2x8's learner settings), and its
plain-torch stand-in for verl's loss computes what orchestra.policy.grpo.grpo_loss does."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_smoke.py"
RESULTS = ("gpu_gen_tok_s", "gpu_engine_first_turn_tok_s", "gpu_plain_generate_tok_s", "gpu_engine_vs_generate",
           "gpu_step_s", "gpu_peak_mem_gib", "gpu_lora_step_s", "gpu_lora_peak_mem_gib")


def load_script():
    if "bench_gpu_smoke" not in sys.modules:  # registered before running: its dataclass resolves its module
        spec = importlib.util.spec_from_file_location("bench_gpu_smoke", SCRIPT)
        sys.modules["bench_gpu_smoke"] = mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    return sys.modules["bench_gpu_smoke"]


def results(stdout: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r"^RESULT (\w+)=([-+0-9.eE]+)$", stdout, flags=re.M)}


def run(cmd: list[str], timeout: int = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})


@pytest.mark.e2e  # a program of its own loading the model and stepping the learner: make test-e2e
def test_cpu_smoke_mode_runs_every_part_and_prints_results():
    proc = run([sys.executable, str(SCRIPT), "--device", "cpu", "--smoke"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = results(proc.stdout)
    assert set(RESULTS) <= set(got), proc.stdout
    assert all(got[k] > 0 for k in RESULTS), got
    assert "KV reuse 4/4 second-turn rows" in proc.stdout
    assert "gpu_smoke: OK" in proc.stdout and "FAIL" not in proc.stdout


@pytest.mark.e2e  # a program of its own loading the model and stepping the learner: make test-e2e
def test_cpu_smoke_mode_runs_the_warm_start_memory_check():
    proc = run([sys.executable, str(SCRIPT), "--device", "cpu", "--smoke", "--warm-start-8b"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = results(proc.stdout)
    for length in (64, 128):  # --smoke's lengths
        assert got[f"gpu_warm_start_peak_gib_{length}"] > 0 and got[f"gpu_warm_start_step_s_{length}"] > 0, got
    # the smoke budget (256 tokens) cuts the 128-token samples two to a micro-batch: the token budget is exercised
    assert "L=128: 4 micro-batches of 2 rows" in proc.stdout and "gpu_smoke: OK" in proc.stdout


def test_warm_start_check_runs_the_h100_presets_learner():
    """bench/gpu_warm_start.py writes h100_2x8's values out (the GPU box has no omegaconf): they must agree."""
    from orchestra.config import load_config

    spec = importlib.util.spec_from_file_location("bench_gpu_warm_start", REPO / "bench" / "gpu_warm_start.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    LORA, PRESET = mod.LORA, mod.PRESET
    cfg = load_config(["experiment=h100_2x8"])
    a = cfg.algo
    assert PRESET == dict(micro_batch_size=a.micro_batch_size, gradient_checkpointing=a.gradient_checkpointing,
                          logit_chunk_tokens=a.logit_chunk_tokens, micro_batch_tokens=a.micro_batch_tokens,
                          lr=a.lr, sft_lr=cfg.sft.lr, kl_coef=a.kl_coef)
    assert LORA == dict(r=cfg.model.lora.r, alpha=cfg.model.lora.alpha)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this checks the no-CUDA path")
def test_shell_script_skips_with_one_line_without_cuda():
    proc = run(["bash", "bench/gpu_smoke.sh"], PY=sys.executable)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SKIP gpu_smoke: no CUDA GPU"), proc.stdout
    proc = run(["bash", "bench/gpu_smoke.sh"], PY="no-such-python-here")
    assert proc.returncode == 0 and proc.stdout.startswith("SKIP gpu_smoke: no Python interpreter"), proc.stdout


def test_a_missing_package_is_named_in_the_skip_reason(monkeypatch):
    mod = load_script()
    monkeypatch.setattr(mod, "missing", lambda name: name == "peft")
    assert mod.skip_reason("cpu", "auto").startswith("peft is not installed")
    monkeypatch.setattr(mod, "missing", lambda name: name == "gguf")
    assert mod.skip_reason("cpu", "auto") is None  # auto falls back to Qwen3-0.6B's shape
    assert "gguf" in mod.skip_reason("cpu", "smollm2")


@pytest.mark.parametrize("kl_coef", [0.0, 1e-2])
def test_standin_loss_matches_verl_grpo_loss(kl_coef):
    pytest.importorskip("verl")
    from orchestra.policy.grpo import grpo_loss

    mod = load_script()
    g = torch.Generator().manual_seed(0)
    B, T = 6, 9
    old = -torch.rand(B, T, generator=g) * 3
    shift = torch.randn(B, T, generator=g) * 0.5
    shift[1, :3] = 2.0  # ratio e^2 > clip_ratio_c on a negative-advantage row: the dual clip bites
    new = (old + shift).requires_grad_(True)
    ref = old + torch.randn(B, T, generator=g) * 0.1
    adv = torch.tensor([1.5, -1.0, 0.3, -2.0, 0.0, 1.0])
    mask = (torch.rand(B, T, generator=g) > 0.2).float()
    mask[1, :3] = 1.0
    kw = dict(kl_coef=kl_coef, batch_num_tokens=int(mask.sum()) + 5)  # a micro-batch of a larger batch
    want, wm = grpo_loss(new, old, ref, adv, mask, **kw)
    got, gm = mod.standin_grpo_loss(new, old, ref, adv, mask, **kw)
    assert float(got.detach()) == pytest.approx(float(want.detach()), rel=1e-5, abs=1e-7)
    (gw,) = torch.autograd.grad(want, new)
    (gg,) = torch.autograd.grad(got, new)
    torch.testing.assert_close(gg, gw)
    for k in ("pg_loss", "kl", "clipfrac", "clipfrac_lower", "ppo_kl"):
        assert gm[k] == pytest.approx(wm[k], rel=1e-4, abs=1e-6), k
    assert 0 < wm["clipfrac"] < 1 and wm["clipfrac_lower"] > 0  # the case exercised both clips


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_smoke_on_cuda():
    proc = run(["bash", "bench/gpu_smoke.sh"], timeout=540, PY=sys.executable)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert set(RESULTS) <= set(results(proc.stdout)), proc.stdout
