"""bench/rl_control.py's reading of a run's records: the policy's own P(escalate) at the decision token, from the
logged log-probs (the less noisy figure of the positive control), on hand-made records with known probabilities;
and its held-out comparison's interval over questions, not question-runs."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from orchestra.preferences import PRESETS
from orchestra.rundir.records import EpisodeLog, read_records

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from rl_control import compare, decision_probs  # noqa: E402

THINK, THEY, AGREE, DIFFER, ANSWER, SUBMIT, END = 1, 2, 3, 4, 5, 6, 7


def record(step: int, pref: str, answers: tuple[str, str], escalate: bool, p_escalate: float) -> dict:
    """Two consults with these answers, then an escalation or a submit; the decision token's logged log-prob is that
    of the sampled token when P(escalate) = p_escalate (the note's other tokens certain)."""
    def call(name: str, tier: str, candidate: str | None = None) -> dict:
        return {"turn": 0, "name": name, "tool_id": tier, "arguments": {"model": tier},
                "result": {"text": "", "meta": {"candidate": candidate}}}

    verdict = AGREE if answers[0] == answers[1] else DIFFER
    ids = [THINK, THEY, verdict, ANSWER if escalate else SUBMIT, END]
    lps = [0.0, 0.0, 0.0, math.log(p_escalate if escalate else 1 - p_escalate), 0.0]
    return {"kind": "train", "step": step, "task": {"pref": PRESETS[pref]}, "advantage": 0.0,
            "tool_calls": [call("consult", "answer-4", answers[0]), call("consult", "answer-3", answers[1]),
                           call("answer" if escalate else "submit", "answer-1")],
            "turns": [{"response_ids": [9], "logprobs": [0.0]}] * 2 + [{"response_ids": ids, "logprobs": lps}]}


def test_the_policys_own_escalation_probability_per_context(tmp_path, capsys):
    recs = []
    for step, (p_dis, p_agr) in ((1, (0.3, 0.3)), (2, (0.9, 0.1))):
        for esc in (True, False):
            recs += [record(step, "accuracy-first", ("A", "B"), esc, p_dis),
                     record(step, "accuracy-first", ("A", "A"), esc, p_agr),
                     record(step, "balanced", ("A", "B"), esc, 0.5)]  # another preset: not counted
    EpisodeLog(tmp_path).write("step_000001", recs)
    got = decision_probs("s0", read_records(tmp_path), window=1)
    assert got["rl_control_policy_gap_first"] == pytest.approx(0.0)
    assert got["rl_control_policy_gap_last"] == pytest.approx(0.8)
    assert "steps 2-2, accuracy-first: mean P(esc | disagree) 0.900 (2), mean P(esc | agree) 0.100 (2)" in \
        capsys.readouterr().out


def test_no_figure_without_both_decisions(tmp_path):
    EpisodeLog(tmp_path).write("step_000001", [record(1, "accuracy-first", ("A", "B"), False, 0.3)])
    assert decision_probs("s0", read_records(tmp_path), window=1) == {}


def summary(rewards: list[float]) -> dict:
    """A held-out summary (cluster/heldout.py's shape) of one preset-independent policy: these rewards per question
    under every preset, never escalating."""
    by = {"escalation_disagree": 0.0, "escalation_agree": 0.0, "reask_disagree": 0.0}
    return {"by_pref": {p: by for p in PRESETS},
            "rewards": [{"task": f"q{i}", "pref": p, "reward": r} for p in PRESETS for i, r in enumerate(rewards)]}


def test_seeds_sharing_their_questions_do_not_narrow_the_interval(capsys):
    """Two seeds that played the same held-out questions identically are one draw per question: pooled as separate
    draws (before issue 51's fix) they narrowed the interval as if the questions were twice as many."""
    before = summary([0.0] * 20)
    after = summary([1.0 if i % 3 else 0.0 for i in range(20)])
    one, two = compare([(before, after)]), compare([(before, after), (before, after)])
    assert two["rl_control_gain_accuracy_first"] == pytest.approx(one["rl_control_gain_accuracy_first"])
    assert two["rl_control_gain_ci_low"] == pytest.approx(one["rl_control_gain_ci_low"])
    assert one["rl_control_gain_ci_low"] < one["rl_control_gain_accuracy_first"]
    assert "(40 question-runs, 20 questions)" in capsys.readouterr().out
