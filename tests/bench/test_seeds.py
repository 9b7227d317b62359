"""bench/seeds.py's figures over seeds on known numbers: a nan makes a minimum nan and fails it, `seeds_follows`
counts verdicts that are ok, a failing seed or goal is a WARNING and a non-zero exit, and a run dir holding a
finished run of another config is refused rather than read."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from orchestra.config import load_config, to_yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import seeds  # noqa: E402

NAN = float("nan")


def curve(costs: list[float]) -> dict:
    return {p: {"cost_usd": c, "accuracy": 0.8, "score": 0.5} for p, c in
            zip(("accuracy-first", "balanced", "cost-first"), costs, strict=True)}


def summary(policy_sweep: list[float], format_ok: float = 1.0, follows_presets: bool = True) -> dict:
    """A run's summary as cluster/trainer.py writes it: presets and sweep for the policy and its router."""
    weights = [0.03, 0.1, 0.3, 1.0, 3.0]
    router = [0.0066, 0.0036, 0.0022, 0.00074, 0.00026]
    presets = [0.005, 0.001, 0.0003] if follows_presets else [0.001, 0.001, 0.001]
    rl = {"by_pref": curve(presets), "pref_spread": presets[0] / presets[2],
          "monotone": float(presets[0] > presets[1] > presets[2]), "format_ok": format_ok, "score": 0.5,
          "rewards": [{"pref": "balanced", "task": "t", "reward": 0.5}]}
    return {"after_sft": dict(rl), "after_rl": rl,
            "router": {"by_pref": curve([0.0053, 0.00075, 0.00038]), "score": 0.5,
                       "sweep": {"points": [{"cost_weight": w, "cost_usd": c} for w, c in zip(weights, router)]}},
            "unseen_sweep": {"adherence": 1.0, "points": [{"cost_weight": w, "cost_usd": c}
                                                          for w, c in zip(weights, policy_sweep, strict=True)]},
            "heldout_unseen_adherence": 1.0, "heldout_vs_estimator": -0.01, "heldout_vs_estimator_hi": 0.01,
            "heldout_reward_gain_hi": 0.002, "rl_kept": 1, "train_wall_s": 300.0, "sft_steps_done": 360,
            "sft_agreement_checks": [{"step": 360, "passed": True, "below": ""}]}


FOLLOWS = [0.006, 0.0033, 0.0019, 0.0007, 0.00025]  # falls with its router at every step
FLAT_MIDDLE = [0.00572, 0.00559, 0.00559, 0.0054, 0.00025]  # seed 0's sweep at bd00958 (docs/quality.md)


def test_a_nan_makes_the_minimum_nan_wherever_it_comes():
    assert min([0.9, NAN]) == 0.9  # what the script used to print for a seed with one $ at every weight
    assert math.isnan(seeds.worst([0.9, NAN])) and math.isnan(seeds.worst([NAN, 0.9]))
    assert seeds.worst([0.9, 0.95]) == 0.9 and seeds.worst([0.01, -0.03], largest=True) == 0.01


def test_aggregates_on_known_numbers():
    cfg = load_config(["experiment=cpu_tiny"])
    ok, flat = seeds.describe_seed(0, summary(FOLLOWS), cfg), seeds.describe_seed(1, summary(FLAT_MIDDLE), cfg)
    assert ok["ok"] and not flat["ok"]
    out = seeds.aggregate([ok, flat])
    assert out["seeds_n"] == 2 and out["seeds_follows"] == 1  # the verdict's ok, not "adherence passes"
    assert out["seeds_min_unseen_adherence"] == 1.0 and out["seeds_min_pref_spread"] == pytest.approx(0.005 / 0.0003)
    # the flat middle's worst step: ln(0.00559 / 0.00559) = 0 of its router's ln(0.0036 / 0.0022)
    assert out["seeds_min_sweep_share"] == pytest.approx(0.0)
    assert out["seeds_min_sweep_ratio"] == pytest.approx(min(0.006 / 0.0007, 0.00572 / 0.0054))
    assert out["seeds_max_abs_vs_estimator"] == pytest.approx(0.01) and out["seeds_wall_s"] == 300.0
    assert out["seeds_rl_kept"] == 2 and out["seeds_all_monotone"] == 1
    assert seeds.failures(out) == ["1 of 2 seeds fail their verdict"]
    unmeasured = seeds.describe_seed(2, summary(FOLLOWS, format_ok=NAN), cfg)
    out = seeds.aggregate([ok, unmeasured])
    assert math.isnan(out["seeds_min_format_ok"])
    assert "seeds_min_format_ok=nan (goal >= 0.98)" in seeds.failures(out)


def test_a_failing_seed_is_a_warning_and_a_non_zero_exit(monkeypatch, capsys):
    runs = {0: summary(FOLLOWS), 1: summary(FLAT_MIDDLE)}
    monkeypatch.setattr(seeds, "train", lambda experiment, seed, run_dir, overrides: runs[seed])
    assert seeds.main(["seeds=2"]) == 1
    out = capsys.readouterr().out
    assert "RESULT seeds_follows=1.0000" in out and "WARNING seeds: 1 of 2 seeds fail their verdict" in out
    assert "WARNING seed 1: the trained policy does not follow" in out and "WARNING seed 0" not in out
    monkeypatch.setattr(seeds, "train", lambda experiment, seed, run_dir, overrides: runs[0])
    assert seeds.main(["seeds=2"]) == 0 and "WARNING" not in capsys.readouterr().out


def test_a_run_dir_is_read_only_under_the_config_asked_for(tmp_path, capsys):
    run = tmp_path / "cpu_tiny" / "s0"
    run.mkdir(parents=True)
    asked = ["sft.steps=30"]
    saved = load_config(["experiment=cpu_tiny", "seed=0", f"run_dir={run}", *asked])
    saved.zoo.retriever.corpus = str(run.resolve() / "data" / "corpus.jsonl")  # as the trainer sets it
    (run / "config.yaml").write_text(to_yaml(saved))
    (run / "summary.json").write_text(json.dumps(summary(FOLLOWS)))
    assert seeds.train("cpu_tiny", 0, run, asked)["rl_kept"] == 1  # same config: read
    out = capsys.readouterr().out
    assert "read (same config" in out and "was trained on an unrecorded machine, this is " in out
    (run / seeds.STAMP).write_text(json.dumps({"commit": "abc1234", "machine": seeds.machine()}))
    seeds.train("cpu_tiny", 0, run, asked)  # trained here: the machine goes unsaid
    out = capsys.readouterr().out
    assert "trained at commit abc1234" in out and "was trained on" not in out
    assert "torch " in seeds.machine() and "CPUs;" in seeds.machine()
    with pytest.raises(seeds.Refused, match="sft.steps"):
        seeds.train("cpu_tiny", 0, run, ["sft.steps=40"])
    assert seeds.main(["seeds=1", f"root={tmp_path}", "sft.steps=40"]) == 2
    (run / "config.1.yaml").write_text(to_yaml(saved))  # a resume under other settings left the first config
    with pytest.raises(seeds.Refused, match="resumed under other settings"):
        seeds.train("cpu_tiny", 0, run, asked)
