"""The cascade teacher (sft.teacher: cascade, RL's positive control): its demonstrations, played through the agent
loop on the simulated zoo, escalate at random whatever the experts said (escalate_on=random, the warm start RL
starts from), or exactly when the two answers disagree under the `read_under` vectors and never under the others
(escalate_on=disagree, the SFT probe), as orchestra/eval/escalation.py measures it."""

from __future__ import annotations

import pytest

from cluster.warm_start import cascade_episodes
from orchestra.config import load_config, task_tiers
from orchestra.data.demos import scripted_trajectories
from orchestra.data.sources import build_task_set
from orchestra.eval.escalation import escalation
from orchestra.policy.models import config_tokenizer
from orchestra.policy.tokenizer import eos_token_ids
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
    esc = [t.tool_records[2].name != "submit" for _, t in eps]
    assert 0.3 < sum(esc) / len(esc) < 0.7
    for preset in ("accuracy-first", "balanced"):  # no rule: escalations on agreeing pairs too
        r = rates(eps, preset)
        assert r["escalation_agree"] > 0 and r["escalation_disagree"] < 1


def test_reading_vectors_are_checked_at_load():
    from orchestra.config import ConfigError

    with pytest.raises(ConfigError, match=r"sft\.read_under"):
        load_config(["experiment=adaptive_control", "sft.read_under=[no-such-preset]"])
    with pytest.raises(ConfigError, match=r"sft\.escalate_on"):
        load_config(["experiment=adaptive_control", "sft.escalate_on=always"])
