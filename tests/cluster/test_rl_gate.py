"""RL that cannot harm (cluster/rl_gate.py): the validation split is training tasks RL never samples, RL is kept where
significantly better than its warm start there, or unless significantly worse (paired interval on known rewards), and a run whose RL is not kept
serves, checkpoints and reports its warm start (a whole toy run, e2e)."""

from __future__ import annotations

import pytest

from cluster import rl_gate
from tests.cluster.test_heldout import _task


def rewards(values: dict[str, float]) -> dict:
    return {"rewards": [{"pref": p, "task": f"t{i}", "reward": v + 0.001 * i}
                        for i in range(20) for p, v in values.items()]}


def test_the_split_is_the_last_training_tasks_and_never_all_of_them():
    train = [_task(i) for i in range(10)]
    rl, val = rl_gate.split(train, 0.2)
    assert [t.id for t in val] == ["t8", "t9"] and rl == train[:8]
    assert rl_gate.split(train, 0.0) == (train, [])
    assert len(rl_gate.split(train, 0.99)[0]) == 1 and rl_gate.split(train[:1], 0.5) == (train[:1], [])


def test_rl_is_kept_unless_significantly_worse_on_known_rewards():
    warm = rewards({"balanced": 0.50, "cost-first": 0.40})
    worse = rl_gate.decide(rewards({"balanced": 0.45, "cost-first": 0.35}), warm)
    assert worse["rl_kept"] == 0 and worse["val_rl_gain_hi"] < 0 and worse["val_rl_gain"] == pytest.approx(-0.05)
    assert "the warm start is kept" in worse["line"]
    same = rl_gate.decide(rewards({"balanced": 0.50, "cost-first": 0.40}), warm)
    assert same["rl_kept"] == 1 and same["val_rl_gain_lo"] <= 0 <= same["val_rl_gain_hi"]
    assert rl_gate.decide(rewards({"balanced": 0.6, "cost-first": 0.5}), warm)["rl_kept"] == 1
    assert rl_gate.decide({}, warm)["rl_kept"] == 1  # nothing to pair: kept, and said so


def test_asked_to_be_better_rl_is_kept_only_where_its_interval_is_above_zero():
    warm = rewards({"balanced": 0.50, "cost-first": 0.40})
    same = rl_gate.decide(rewards({"balanced": 0.50, "cost-first": 0.40}), warm, "better")
    assert same["rl_kept"] == 0 and "not significantly better" in same["line"]
    better = rl_gate.decide(rewards({"balanced": 0.6, "cost-first": 0.5}), warm, "better")
    assert better["rl_kept"] == 1 and better["val_rl_gain_lo"] > 0
    with pytest.raises(ValueError, match="keep_rl"):
        rl_gate.decide(warm, warm, "sometimes")


def test_the_reverted_summary_reports_the_warm_starts_figures():
    s = {"after_sft": {"score": 0.4}, "after_rl": {"score": 0.3}, "sft_unseen_sweep": {"adherence": 1.0},
         "unseen_sweep": {"adherence": 0.5}}
    out = rl_gate.reverted(s)
    assert out["after_rl"] == {"score": 0.4} and out["unseen_sweep"] == {"adherence": 1.0}
    assert s["after_rl"] == {"score": 0.3}  # the caller's summary is not changed


@pytest.mark.e2e  # a whole toy run of its own: make test-e2e
def test_a_run_whose_rl_is_not_kept_serves_and_reports_its_warm_start(ray_cluster, tmp_path, monkeypatch, capsys):
    import json

    from safetensors.torch import load_file

    from cluster.train import main
    from tests.cluster.test_train import EXPECTED_VALUE, SMALL

    real = rl_gate.decide
    monkeypatch.setattr(rl_gate, "decide", lambda a, b, k: {**real(a, b, k), "rl_kept": 0})  # as if RL were worse
    run = tmp_path / "run"
    assert main([*SMALL, *EXPECTED_VALUE, "eval.sweep=false", f"run_dir={run}"]) == 0
    out = capsys.readouterr().out
    assert "RESULT rl_kept=0.0000" in out and "RESULT heldout_reward_gain=0.0000" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["after_rl"] == summary["after_sft"]
    last = sorted((run / "checkpoints").glob("step_*"))[-1]
    kept, warm = (load_file(str(d / "model.safetensors")) for d in (last / "learner", run / "warm_start"))
    assert kept.keys() == warm.keys() and all((kept[k] == warm[k]).all() for k in kept)
