"""`make train`'s verdict on whole toy runs (cluster/train.py through the real actors, shared local Ray cluster): a
policy blind to its preference by construction (every episode one fixed route) fails it, the phase is named (the
warm start already gave every preset that route) and train.strict turns the failure into exit status 1; a policy
that reads its cost word by construction passes it. The policies are scripted engines
(tests/helpers/scripted_policy.py): what is tested is the verdict of a real run, not a trained model. Both runs are
`e2e` (make test-e2e: each a driver start-up of its own); the verdict's rules are unit-tested in
tests/orchestra/eval/test_verdict.py, which make test runs."""

from __future__ import annotations

import pytest

from cluster.train import main
from tests.cluster.test_train import SMALL

JUDGED = ["eval.presets=[accuracy-first,balanced,cost-first]", "eval.sweep=true", "eval.n_tasks=3",
          "agent.preference_words=true", "agent.preference_numbers=false",
          "agent.preference_levels=[0.056,0.178,0.56,1.78]", "algo.steps=1", "checkpoint.every_steps=1"]


def train(tmp_path, engine: str, *extra: str) -> str:
    return [*SMALL, *JUDGED, f"engine.kind=tests.helpers.scripted_policy:{engine}", f"run_dir={tmp_path / engine}",
            *extra]


@pytest.mark.e2e  # a whole run of its own: make test-e2e
def test_a_run_that_loses_its_preference_says_so_and_fails_under_strict(ray_cluster, tmp_path, capsys):
    assert main(train(tmp_path, "fixed_route", "train.strict=true")) == 1
    out = capsys.readouterr().out
    assert "RESULT heldout_follows_preference=0" in out and "RESULT heldout_pref_spread=1.0000" in out
    warnings = "\n".join(line for line in out.splitlines() if line.startswith("WARNING"))
    assert "lost in the warm start (SFT)" in warnings and "goal >= 3x" in warnings
    assert "this run fails under train.strict=true" in warnings


@pytest.mark.e2e
def test_a_run_that_follows_its_preference_passes(ray_cluster, tmp_path, capsys):
    assert main(train(tmp_path, "cost_reader", "train.strict=true")) == 0
    out = capsys.readouterr().out
    assert "RESULT heldout_follows_preference=1" in out and "RESULT heldout_monotone=1.0000" in out
    assert not any(line.startswith("WARNING") for line in out.splitlines())
