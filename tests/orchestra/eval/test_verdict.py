"""The run's verdict (orchestra/eval/verdict.py) on summaries shaped as cluster/trainer.py writes them: a policy that
follows its preference passes; one that gives every preset one route fails, and the phase is named by the warm
start's own figures; an SFT stopped at its step cap below its goal fails on its own; what was not measured is never
passed."""

from __future__ import annotations

from types import SimpleNamespace

from orchestra.eval.verdict import Goals, report, sft_goal, verdict

FOLLOWS = {"pref_spread": 31.4, "monotone": 1.0}
ONE_ROUTE = {"pref_spread": 1.0, "monotone": 0.0}


def run(sft: dict, rl: dict, adherence: float | None = 0.97, **extra) -> dict:
    out = {"after_sft": dict(sft), "after_rl": dict(rl), **extra}
    if adherence is not None:
        out["unseen_sweep"] = {"adherence": adherence, "points": []}
    return out


def test_a_policy_that_follows_passes():
    v = verdict(run(FOLLOWS, FOLLOWS), Goals())
    assert v.follows is True and v.ok and v.lost_in == "" and report(v, {}) == []
    assert v.checked == ["pref_spread", "monotone", "unseen_adherence"]


def test_one_route_for_every_preset_after_sft_is_lost_in_sft():
    s = run(ONE_ROUTE, ONE_ROUTE, adherence=float("nan"))
    v = verdict(s, Goals())
    assert v.follows is False and v.lost_in == "sft" and not v.ok
    assert len(v.problems) == 3  # spread, order, and the nan adherence (one $ for every weight) all fail
    lines = report(v, s)
    assert "lost in the warm start (SFT)" in "\n".join(lines) and "sft.steps" in "\n".join(lines)


def test_rl_that_undoes_a_following_warm_start_is_lost_in_rl():
    v = verdict(run(FOLLOWS, {"pref_spread": 2.1, "monotone": 1.0}), Goals())
    assert v.follows is False and v.lost_in == "rl"
    assert v.problems == ["accuracy-first spends 2.10x what cost-first spends (goal >= 3x)"]
    assert "lost in RL" in "\n".join(report(v, {})) and "algo.steps=0" in "\n".join(report(v, {}))


def test_each_goal_fails_alone():
    assert verdict(run(FOLLOWS, {"pref_spread": 5.0, "monotone": 0.0}), Goals()).follows is False
    assert verdict(run(FOLLOWS, FOLLOWS, adherence=0.8), Goals()).follows is False
    assert verdict(run(FOLLOWS, FOLLOWS, adherence=0.8), Goals(min_adherence=0.7)).follows is True
    assert verdict(run(FOLLOWS, {"pref_spread": 5.0, "monotone": 1.0}), Goals(min_spread=6)).follows is False


def test_what_was_not_measured_is_not_judged():
    assert verdict({"after_rl": {"score": 0.5}}, Goals()).follows is None  # no cost-ordered presets
    v = verdict(run(FOLLOWS, FOLLOWS, adherence=None), Goals())  # eval.sweep off: judged on spread and order only
    assert v.follows is True and "unseen_adherence" not in v.checked
    unknown = verdict({"after_rl": ONE_ROUTE}, Goals())  # no warm-start evaluation to name the phase by
    assert unknown.follows is False and unknown.lost_in == "" and "not known" in "\n".join(report(unknown, {}))


def test_sft_stopped_at_its_cap_below_its_goal_fails_on_its_own():
    checks = [{"step": 400, "passed": False, "below": "52% hint agreement under accuracy-first (goal 90%)"},
              {"step": 800, "passed": False, "below": "71% hint agreement under accuracy-first (goal 90%)"}]
    s = run(FOLLOWS, FOLLOWS, sft_agreement_checks=checks, sft_steps_done=800)
    v = verdict(s, Goals(), sft_max_steps=800)
    assert v.follows is True and not v.ok and "71% hint agreement under accuracy-first" in v.sft_short
    assert any("sft.max_steps=800" in line for line in report(v, s))
    reached = dict(s, sft_steps_done=500, sft_agreement_checks=[{"step": 500, "passed": True, "below": ""}])
    assert verdict(reached, Goals(), 800).ok
    assert verdict(s, Goals(), 0).ok  # SFT checked nothing: no goal to fall short of


def test_sft_goal_only_where_sft_checks_the_policy():
    cfg = SimpleNamespace(sft=SimpleNamespace(until_agreement=0.9, until_follows=False, max_steps=800),
                          agent=SimpleNamespace(route_hints=True))
    assert sft_goal(cfg) == 800
    cfg.agent.route_hints = False  # until_agreement is inert without hints (warm_start.sft_checks)
    assert sft_goal(cfg) == 0
    cfg.sft.until_follows = True
    assert sft_goal(cfg) == 800


def test_a_goal_met_exactly_is_met():
    """Five sweep points with one adjacent pair swapped give a Spearman of 0.9, which scipy returns as
    0.8999999999999998 (seed 1's sweep, docs/quality.md)."""
    from scipy.stats import spearmanr

    adherence = -spearmanr([0.03, 0.1, 0.3, 1, 3], [5.0, 4.0, 2.0, 3.0, 1.0]).statistic
    assert adherence < 0.9 and verdict(run(FOLLOWS, FOLLOWS, adherence=adherence), Goals()).follows is True
    assert verdict(run(FOLLOWS, FOLLOWS, adherence=0.8999), Goals()).follows is False
