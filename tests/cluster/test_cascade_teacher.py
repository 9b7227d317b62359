"""The cascade teacher (sft.teacher: cascade, RL's positive control): its demonstrations, played through the agent
loop on the simulated zoo, escalate at random whatever the experts said (escalate_on=random, the warm start RL
starts from), or exactly when the two answers disagree under the `escalate_under` vectors and never under the others
(escalate_on=disagree, the SFT probe), as orchestra/eval/escalation.py measures it."""

from __future__ import annotations

import pytest

from cluster.teachers.cascade import cascade_episodes
from orchestra.agent.consults import agree
from orchestra.agent.prompt import restatement
from orchestra.config import load_config, task_tiers
from orchestra.data.demos import scripted_trajectories
from orchestra.data.sources import build_task_set
from orchestra.engine import eos_token_ids
from orchestra.eval.escalation import escalation
from orchestra.policy.models import config_tokenizer
from orchestra.preferences import PRESETS, is_among
from tools.base import LocalToolClient
from tools.registry import build_tools, zoo_dict


def played(overrides: list[str]) -> list[tuple[str, object]]:
    """(preset name, trajectory) for each demonstration of 40 training tasks under the pairing's two vectors."""
    cfg = load_config(["experiment=adaptive_control", "data.n_train=40", "data.n_heldout=4", *overrides])
    train, _, _ = build_task_set(cfg.data, task_tiers(cfg))
    episodes, _, _ = cascade_episodes(cfg, train)
    tok = config_tokenizer(cfg.model)
    trajs = scripted_trajectories(episodes, LocalToolClient(build_tools(zoo_dict(cfg.zoo))), tok,
                                  cfg.agent.prompter_kwargs(), cfg.agent.loop_kwargs(), eos_token_ids(tok),
                                  cfg.sampling.max_tokens)
    names = [next(n for n, v in PRESETS.items() if is_among(t.pref, [v])) for t, _ in episodes]
    return list(zip(names, trajs, strict=True))


def rates(episodes: list[tuple[str, object]], preset: str) -> dict[str, float]:
    return escalation(t for n, t in episodes if n == preset)


def test_the_reading_teacher_escalates_exactly_on_disagreement():
    eps = played(["sft.escalate_on=disagree"])
    acc, bal = rates(eps, "accuracy-first"), rates(eps, "balanced")
    assert acc["pairs_disagree"] >= 5 and acc["pairs_agree"] >= 5  # both cases occur among the 40 tasks
    assert (acc["escalation_disagree"], acc["escalation_agree"]) == (1.0, 0.0)
    assert (bal["escalation_disagree"], bal["escalation_agree"]) == (0.0, 0.0)


def test_the_warm_start_teacher_escalates_whatever_they_said():
    eps = played(["sft.escalate_share=0.5"])
    esc = [t.tool_records[2].name != "submit" for n, t in eps if n == "accuracy-first"]
    assert 0.3 < sum(esc) / len(esc) < 0.7
    r = rates(eps, "accuracy-first")  # no rule: escalations on agreeing pairs too
    assert r["escalation_agree"] > 0 and r["escalation_disagree"] < 1
    bal = rates(eps, "balanced")  # outside sft.escalate_under: always a submit
    assert (bal["escalation_disagree"], bal["escalation_agree"]) == (0.0, 0.0)


def test_restating_teachers_note_what_they_saw_and_decide_as_before():
    plain, noted = played(["sft.escalate_share=0.5", "sft.restate=false"]), played(["sft.escalate_share=0.5"])
    for (_, a), (_, b) in zip(plain, noted, strict=True):
        assert [r.name for r in a.tool_records] == [r.name for r in b.tool_records]  # the same random draws
        recs = b.tool_records
        verdict = "agree" if agree(recs[0].result.candidate, recs[1].result.candidate) else "differ"
        assert b.turns[2].text.startswith(f"<think>they {verdict} {recs[2].name}</think><tool_call>")
        assert not any("<think>" in t.text for t in b.turns[:2])  # one answer seen: nothing to restate
    assert {n: rates(noted, n) for n in PRESETS} == {n: rates(plain, n) for n in PRESETS}
    read = played(["sft.escalate_on=disagree", "sft.restate=true"])
    assert (rates(read, "accuracy-first")["escalation_disagree"], rates(read, "accuracy-first")["escalation_agree"]) \
        == (1.0, 0.0)


def test_restatement_reads_the_last_heading():
    assert restatement("Expert answers:\nanswer-4: B", "consult") == ""
    assert restatement("Expert answers (they agree):\na: B\nb: B\n...Expert answers (they differ):\na: B\nb: C",
                       "answer") == "<think>they differ answer</think>"
    assert restatement("no answers yet", "submit") == ""


def test_reading_vectors_are_checked_at_load():
    from orchestra.config import ConfigError

    with pytest.raises(ConfigError, match=r"sft\.escalate_under"):
        load_config(["experiment=adaptive_control", "sft.escalate_under=[no-such-preset]"])
    with pytest.raises(ConfigError, match=r"sft\.escalate_on"):
        load_config(["experiment=adaptive_control", "sft.escalate_on=always"])
