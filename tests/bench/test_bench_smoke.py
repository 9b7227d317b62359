"""Every bench/ script at tiny sizes: it completes and prints its RESULT lines. Benchmarks rot unseen otherwise
(bench/rollout_overlap.py crashed for weeks, `'EpisodeResult' object is not subscriptable`, once rollout results
became typed; bench/rollout_scaling.py printed no RESULT unless run at its default sizes). Only that the script
runs is asserted; the figures are make bench's, on a quiet machine.

Each smoke run is a program of its own (a Ray cluster, models built and timed; the toy-run scripts train through
cluster.train): together minutes on 2 cores, so they are `e2e` (make test-e2e) but for the cheap ones (FAST).
`make test` still checks that every script has its smoke run, and has bench/seeds.py and bench/rl_value.py read the
session's toy run of cpu_tiny's recipe (tests/conftest.py) as a finished run: their figures, without their training."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# cpu_tiny's recipe at toy size: one RL step after a 4-step warm start on 12 tasks
TOY = ["data.n_train=12", "data.n_heldout=4", "eval.n_tasks=2", "router.folds=2", "sft.steps=4", "sft.max_steps=4",
       "sft.vectors_sampled=1", "algo.steps=1", "algo.group_size=2", "algo.prompts_per_step=2", "eval.sweep=false",
       "log.replay_weights=false", "log.tensorboard=false", "log.plots=false", "checkpoint.every_steps=1",
       "cluster.torch_threads=1", "algo.val_share=0.2"]
SMOKE = {  # script -> (arguments for seconds-long sizes, RESULT names it must print)
    "continuous_batching.py": (["--episodes", "4", "--turns", "2", "--max-tokens", "8", "--min-tokens", "4",
                                "--max-tool-s", "0.02"], {"continuous_batching_speedup"}),
    "engine_efficiency.py": (["--episodes", "4", "--turns", "2", "--max-tokens", "8", "--repeats", "1"],
                             {"engine_efficiency", "prefill_chunked_speedup"}),
    "learner_overhead.py": (["--samples", "4", "--prompt", "32", "--response", "16", "--repeats", "1"],
                            {"learner_overhead"}),
    "policy_update.py": (["--samples", "4", "--tail", "16", "--response", "8", "--repeats", "1", "--model", "tiny"],
                         {"policy_update_s", "lora_speedup", "shared_prefix_speedup"}),
    "rollout_scaling.py": (["--sizes", "2,4", "--turns", "1", "--max-tokens", "8", "--repeats", "1"],
                           {"rollout_scaling_4_vs_2"}),
    "rollout_overlap.py": (["--episodes", "4", "--singles", "1", "--repeats", "1", "--latency", "0.02"],
                           {"rollout_overlap", "speedup_vs_concurrency2"}),
    "sandbox_start.py": (["--runs", "2"], {"sandbox_start_p50_ms"}),
    "tool_server.py": (["--calls", "50", "--inflight", "8"], {"tool_server_overhead_p50_ms"}),
    "serve.py": (["--smoke"], {"router_overhead_p50_ms", "router_pick_p50_ms"}),
    "retrieval.py": (["--smoke"], {"retrieval_build_s_per_1k", "hybrid_qps"}),
    # cpu_tiny's recipe with partial exploration, one seed; its exhaustive run is seeds.py's (test below)
    "rl_value.py": (["seeds=1", "partial=0.5", "runs={tmp}", *TOY], {"rl_gain", "rl_gain_ci_low", "rl_spend_ratio",
                                                                     "rl_partial_vs_warm_start"}),
    # one toy run of cpu_tiny's recipe judged as make train judges itself (the verdict), figures over seeds
    "seeds.py": (["seeds=1", "root={tmp}", *TOY],
                 {"seeds_n", "seeds_follows", "seeds_min_pref_spread", "seeds_all_monotone", "seeds_min_format_ok",
                  "seeds_min_vs_estimator_hi", "seeds_min_rl_gain_hi", "seeds_rl_gain"}),
    # a toy run's demonstrations dumped, then two SFT steps replayed outside Ray on the CPU (CUDA: a skip line)
    "sft_lab.py": (["run={tmp}/lab", "steps=2", "every=1", "tasks=2", "devices=cpu,cuda", *TOY],
                   {"sft_lab_cpu_i0_agree_accuracy_first", "sft_lab_cpu_i0_contrast"}),
    # one toy run of adaptive_control's recipe (cascade teacher, GRPO paired over presets)
    "rl_control.py": (["seeds=1", "root={tmp}", "data.n_train=12", "data.n_heldout=4", "eval.n_tasks=4",
                       "sft.steps=4", "algo.steps=1", "algo.group_size=2", "algo.prompts_per_step=2",
                       "eval.sweep=false", "log.replay_weights=false", "log.tensorboard=false", "log.plots=false",
                       "checkpoint.every_steps=1", "cluster.torch_threads=1"],
                      {"rl_control_escalation_gain", "rl_control_gain_ci_low", "escalation_disagree_cost_first",
                       "rl_control_read_margin"}),
}
# covered elsewhere, with why: each needs more than seconds or a second venv
ELSEWHERE = {"gpu_smoke.py": "tests/bench/test_gpu_smoke.py runs its --smoke mode",
             "verl_cpu.py": "verl's trainer end to end takes minutes: make test-nodes (.ci/run) runs the same path "
                            "across two nodes (bench/nodes.py)",
             "rl_control_verl.py": "verl's trainer takes minutes: tests/cluster/verl/test_rl_control.py runs it small "
                                   "(make test-verl-cpu)",
             "nodes.py": "a three-node Ray cluster and verl jobs take minutes: tests/bench/test_nodes.py (make test-nodes)",
             "serve_nodes.py": "bench/nodes.py runs its serve_under_loss on its cluster (make test-nodes)",
             "vllm_cpu_engine.py": "needs .venv-vllm: tests/cluster/test_vllm_cpu.py (make test-vllm-cpu) runs it small",
             "gpu_warm_start.py": "tests/bench/test_gpu_smoke.py runs it through gpu_smoke.py --smoke --warm-start-8b",
             "cascades.py": "needs the shared data: test_cascades_smoke below",
             "quality.py": "needs the shared data: test_quality_routers_smoke below (the policy part trains a run: "
                           "minutes)"}


def test_every_bench_script_has_a_smoke_run():
    scripts = {p.name for p in (ROOT / "bench").glob("*.py")}
    assert scripts == set(SMOKE) | set(ELSEWHERE), "add the new bench script's smoke arguments to SMOKE"


NEEDS_SHARED_DATA = {"retrieval.py"}  # reads ../shared/data's HotpotQA files: skipped without them, as the data tests
FAST = {"sandbox_start.py"}  # seconds on 2 cores: in make test


SHARED_RUN = ("seeds.py", "rl_value.py")  # one toy run for both: test_seeds_then_rl_value_smoke


# bench/seeds.py exits 1 when a seed fails its verdict, as a toy run of a few SFT steps does: its figures are still
# printed, and the exit status says what they mean
EXIT = {"seeds.py": (0, 1)}


def smoke(script: str, tmp_path: Path) -> str:
    """Run bench/<script> at its SMOKE arguments ({tmp}: tmp_path); its stdout, once it printed its RESULT names."""
    args, names = SMOKE[script]
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]  # a script's own output dir
    r = subprocess.run([sys.executable, f"bench/{script}", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=280)
    assert r.returncode in EXIT.get(script, (0,)), r.stderr[-3000:]
    if r.returncode:
        assert "WARNING seeds: " in r.stdout, r.stdout[-2000:]
    printed = set(re.findall(r"^RESULT (\w+)\s*=", r.stdout, re.M))
    assert names <= printed, (sorted(names - printed), r.stdout[-2000:])
    return r.stdout


@pytest.mark.parametrize("script", [s if s in FAST else pytest.param(s, marks=pytest.mark.e2e)
                                    for s in sorted(set(SMOKE) - set(SHARED_RUN))])
def test_bench_smoke_prints_its_figures(script, tmp_path, request):
    if script in NEEDS_SHARED_DATA:
        request.getfixturevalue("shared_data")
    smoke(script, tmp_path)


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_seeds_then_rl_value_smoke(tmp_path):
    """bench/seeds.py trains one toy run of cpu_tiny's recipe and judges it; bench/rl_value.py then reads that run
    as its exhaustive recipe's (the same experiment, seed and overrides: what it would have trained) and trains only
    its partial-exploration run: one driver start-up fewer, each script still training end to end."""
    smoke("seeds.py", tmp_path)
    (tmp_path / "exhaustive_s0").symlink_to(tmp_path / "cpu_tiny" / "s0")
    out = smoke("rl_value.py", tmp_path)
    assert "training partial_s0" in out and "training exhaustive_s0" not in out, out[-2000:]


@pytest.mark.parametrize("script", ["seeds.py", "rl_value.py"])
def test_bench_reads_a_finished_run(script, toy_run, tmp_path, monkeypatch, capsys):
    """The session's toy run laid out where each script looks for its runs (a summary.json there: read, not trained
    again): bench/seeds.py's seed 0 and both of bench/rl_value.py's recipes. Run as `python bench/<script>` is, in
    this process (the toy run's modules already imported): every RESULT line of the smoke run is printed."""
    from tests.cluster.test_train import EXPECTED_VALUE, SMALL

    run, _ = toy_run
    if script == "seeds.py":  # read only under the config the run was trained with
        (tmp_path / "cpu_tiny").mkdir()
        (tmp_path / "cpu_tiny" / "s0").symlink_to(run)
        argv = ["seeds=1", f"root={tmp_path}", *SMALL, *EXPECTED_VALUE]
    else:
        for recipe in ("exhaustive", "partial"):
            (tmp_path / f"{recipe}_s0").symlink_to(run)
        argv = ["seeds=1", "partial=0.5", f"runs={tmp_path}"]
    monkeypatch.setattr(sys, "argv", [f"bench/{script}", *argv])
    try:
        runpy.run_path(str(ROOT / "bench" / script), run_name="__main__")
    except SystemExit as e:
        assert e.code in (0, None, *EXIT.get(script, ())), e.code
    out = capsys.readouterr().out
    assert "[rl_value] training" not in out and "INFO seeds: cluster.train" not in out  # read, not trained
    assert script != "seeds.py" or "s0 read (same config" in out
    printed = set(re.findall(r"^RESULT (\w+)\s*=", out, re.M))
    assert SMOKE[script][1] <= printed, (sorted(SMOKE[script][1] - printed), out[-2000:])


@pytest.mark.e2e
def test_quality_routers_smoke(shared_data):
    """bench/quality.py's router part (no policy to train) on small splits of the shared recordings (without the
    MMLU-Pro preset's extra router questions: embedding them took 2 of this test's 3 minutes; the two-model pair cut
    from MMLU-Pro's 381 history questions, not its 1,351 math ones: 91 s against 127 s, one paired run alone),
    embedded in float32: on a CPU without bf16 instructions (AVX2 only) router.embed_dtype's bf16 took 6 of 7
    minutes (the math pair set's 1,351 questions: 72 s in float32)."""
    r = subprocess.run([sys.executable, "bench/quality.py", "only=routers", "routers_seeds=1", "mmlu_train=40",
                        "mmlu_heldout=40", "mmlu_extra=0", "pair_heldout=40", "pair_families=history",
                        "routers_embed_dtype=float32"],
                       cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = set(re.findall(r"^RESULT (\w+)=", r.stdout, re.M))
    assert {"routers_ra_logloss_estimator", "routers_ra_yardstick_accstrong_apgr_estimator",
            "routers_mmlu_logloss_estimator"} <= printed, r.stdout[-2000:]


def test_cascades_smoke(shared_data):
    """bench/cascades.py on small splits of the shared MMLU-Pro recordings, routers off (no embedding: seconds)."""
    r = subprocess.run([sys.executable, "bench/cascades.py", "seeds=1", "train=200", "heldout=200", "routers=false"],
                       cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    printed = set(re.findall(r"^RESULT (\w+)=", r.stdout, re.M))
    assert {"cascade_best_hand_acc", "cascade_best_hand_cost_ratio", "cascade_oracle_acc"} <= printed, r.stdout[-2000:]


def test_sft_lab_reads_a_runs_notes(toy_run, capsys):
    """bench/sft_lab.py notes=RUN: what the session's toy run writes in its note for each cost weight, and the share
    naming the weight's own bin (a toy policy writes no note worth the name: the figure is a share, whatever it is)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from sft_lab import notes

    run, _ = toy_run
    share = notes(run, [0.03, 3.0])
    out = capsys.readouterr().out
    assert 0.0 <= share <= 1.0 and "INFO sft_lab notes: cost 0.03 (bin: cost minimal, latency none)" in out
    assert "INFO sft_lab notes: cost 3 (bin: cost top, latency none)" in out
