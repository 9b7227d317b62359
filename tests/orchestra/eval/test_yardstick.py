"""RouteLLM's yardstick (orchestra/eval/yardstick.py) against curves worked out by hand on tiny logs: ties in the
router's scores, the degenerate cases (strong as accurate as weak; a perfect router is the oracle), operating
points, and the n-model $ area. One test replays RouteLLM's own loop with pandas (pd.qcut, np.interp) on random
scores and asks for the same numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from orchestra.eval import yardstick as ys

# q1..q4: strong right on q1-q3, weak only on q1; the router ranks q2 > q3 > q4 > q1
STRONG, WEAK, SCORES = [1, 1, 1, 0], [1, 0, 0, 0], [0.1, 0.9, 0.5, 0.3]


def pts(curve: ys.Curve) -> np.ndarray:
    return np.array(curve.points())


def test_thresholds_are_the_deciles_of_the_scores():
    # linear quantiles of [0.1, 0.3, 0.5, 0.9] at 0, 0.1, ..., 1 (positions 0, 0.3, ..., 3)
    want = [0.1, 0.16, 0.22, 0.28, 0.34, 0.4, 0.46, 0.54, 0.66, 0.78, 0.9]
    assert ys.thresholds(SCORES) == pytest.approx(want)


def test_score_curve_by_hand():
    c = ys.score_curve(STRONG, WEAK, SCORES)
    # edge 0.1 (>=): all strong; 0.16-0.28: q2-q4; 0.34-0.46: q2, q3; 0.54-0.78: q2; the last (> 0.9): nobody
    want = [(0, .25)] + [(.25, .5)] * 3 + [(.5, .75)] * 3 + [(.75, .75)] * 3 + [(1, .75)]
    assert pts(c) == pytest.approx(np.array(want))
    assert (c.weak, c.strong) == (0.25, 0.75)
    # AUC = .25·(.25+.5)/2 + .25·(.5+.75)/2 + .25·.75 + .25·.75
    assert c.auc == pytest.approx(0.625)
    assert c.apgr == pytest.approx((0.625 - 0.25) / 0.5)
    # CPT: targets .35, .5, .65 read back on the curve: 0.1, 0.25 (where it first reaches .5), 0.4
    assert [c.cpt(g) for g in ys.GAPS] == pytest.approx([0.1, 0.25, 0.4])
    assert c.monotone


def test_ties_move_as_one_block():
    # three questions tie at the lowest score: every edge up to the 60 % one equals it and sends all four strong
    c = ys.score_curve([1, 1, 0, 1], [0, 0, 0, 1], [0.5, 0.5, 0.5, 0.9])
    assert sorted(set(c.points())) == [(0.0, .25), (.25, .25), (1.0, .75)]  # no point at 50 % or 75 %
    assert c.auc == pytest.approx(.25 * .25 + .75 * (.25 + .75) / 2)
    assert c.apgr == pytest.approx(0.375)
    assert c.cpt(0.5) == pytest.approx(0.25 + 0.25 / 0.5 * 0.75)  # on the jump from 25 % to 100 %


def test_constant_scores_are_the_random_line():
    c = ys.score_curve([1, 0, 1, 1], [0, 0, 1, 0], [0.3] * 4)
    assert sorted(set(c.points())) == [(0.0, 0.25), (1.0, 0.75)]
    assert c.apgr == pytest.approx(0.5)  # PGR equals the share along a straight line: its mean is 1/2
    assert c.cpt(0.5) == pytest.approx(0.5)
    r = ys.random_line(0.25, 0.75)
    assert r.apgr == pytest.approx(0.5) and [r.cpt(g) for g in ys.GAPS] == pytest.approx(list(ys.GAPS))


def test_strong_as_accurate_as_weak_has_no_apgr():
    c = ys.score_curve([1, 0, 1, 0], [0, 1, 0, 1], [0.9, 0.1, 0.8, 0.2])
    assert c.weak == c.strong == 0.5
    assert math.isnan(c.apgr)
    assert math.isnan(ys.points_curve([(0.5, 0.6)], 0.5, 0.5).apgr)


def test_oracle_by_hand():
    # weak right on 1 of 4; 2 more where weak is wrong and strong right: (1 + min(4s, 2)) / 4
    o = ys.oracle_curve(STRONG, WEAK)
    assert o.x == pytest.approx(np.linspace(0, 1, 11))
    assert o.accuracy == pytest.approx([(1 + min(4 * s, 2)) / 4 for s in np.linspace(0, 1, 11)])
    assert o.accuracy[-1] == pytest.approx(0.75)  # any model right: q1-q3


def test_a_perfect_router_reaches_the_oracle():
    rng = np.random.default_rng(0)
    weak = rng.random(40) < 0.5
    strong = weak | (rng.random(40) < 0.6)  # right wherever weak is, and more: the oracle is strong + ...
    perfect = strong.astype(float) - weak.astype(float) + 1e-3 * rng.random(40)  # the gain first, ties broken
    c = ys.score_curve(strong, weak, perfect)
    gain, n = float(np.sum(strong & ~weak)), 40
    for share, acc in c.points():
        assert acc == pytest.approx((weak.sum() + min(share * n, gain)) / n)
    assert c.apgr > ys.score_curve(strong, weak, rng.random(40)).apgr


def test_operating_points_anchored_and_as_given():
    c = ys.points_curve([(0.5, 0.7)], weak=0.5, strong=0.8)
    assert c.points() == [(0.0, 0.5), (0.5, 0.7), (1.0, 0.8)]
    assert c.apgr == pytest.approx(((0.5 + 0.7) / 4 + (0.7 + 0.8) / 4 - 0.5) / 0.3)
    assert c.cpt(0.5) == pytest.approx(0.15 / 0.2 * 0.5)
    # RouteLLM's formulas on the points alone: normalised over the share they cover; nan with one share
    raw = ys.points_curve([(0.6, 0.7), (0.2, 0.6)], 0.5, 0.8, anchor=False)
    assert raw.apgr == pytest.approx(((0.6 + 0.7) / 2 * 0.4 - 0.5 * 0.4) / (0.3 * 0.4))
    assert math.isnan(ys.points_curve([(0.5, 0.7)], 0.5, 0.8, anchor=False).apgr)
    # a score router's curve already holds both anchors: as operating points it scores the same
    s = ys.score_curve(STRONG, WEAK, SCORES)
    assert ys.points_curve(s.points(), s.weak, s.strong).apgr == pytest.approx(s.apgr)


def test_usd_curve_normalises_between_cheapest_and_strongest():
    cheap, strong = (0.001, 0.5), (0.011, 0.8)
    c = ys.usd_curve([(0.006, 0.7)], cheap, strong)
    assert c.apgr == pytest.approx(ys.points_curve([(0.5, 0.7)], 0.5, 0.8).apgr)
    # a point beyond always-strongest's $ is outside the window: plotted, not integrated
    assert ys.usd_curve([(0.006, 0.7), (0.02, 0.95)], cheap, strong).apgr == pytest.approx(c.apgr)
    # two models at fixed prices: the $ axis is the share axis
    s = ys.score_curve(STRONG, WEAK, SCORES)
    pts = [(0.001 + x * 0.01, a) for x, a in s.points()]
    assert ys.usd_curve(pts, cheap, strong).apgr == pytest.approx(
        ys.points_curve(s.points(), 0.5, 0.8).apgr)
    with pytest.raises(ValueError):
        ys.usd_curve([(0.5, 0.5)], (1.0, 0.5), (1.0, 0.8))


def test_usd_oracle_three_models_by_hand():
    # models cost 1, 2, 5 per question; q2 is bought at model 1 (+1), q3 at model 2 (+4), q4 nobody gets
    ok = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]])
    cost = np.array([[1.0, 2.0, 5.0]] * 4)
    o = ys.usd_oracle(ok, cost, cheapest=0, strongest=2)
    # mean $ 1 -> 1.25 -> 2.25, normalised over 1..5: 0, 1/16, 5/16; then flat to 1
    assert pts(o) == pytest.approx(np.array([(0, .25), (.0625, .5), (.3125, .75), (1, .75)]))
    auc = .0625 * (.25 + .5) / 2 + .25 * (.5 + .75) / 2 + .6875 * .75
    assert o.apgr == pytest.approx((auc - .25) / (.75 - .25))
    # two models at fixed prices: the same line as RouteLLM's oracle
    two = ys.usd_oracle(np.c_[WEAK, STRONG], np.array([[1.0, 3.0]] * 4), 0, 1)
    ref = ys.oracle_curve(STRONG, WEAK)
    assert np.interp(ref.x, two.x, two.accuracy) == pytest.approx(ref.accuracy)


def test_episode_points_and_log_yardstick():
    cost = np.array([[1.0, 5.0]] * 4)
    eps = [("cheap", 0, {0: 1}, True), ("cheap", 1, {0: 1}, False), ("strong", 0, {1: 1}, True),
           ("strong", 1, {}, False)]  # the last answered nothing: wrong, free, not a strong call
    assert ys.episode_points(eps, cost, strong=1) == {"cheap": (0.0, 0.5), "strong": (0.5, 0.5)}
    assert ys.episode_points(eps, cost) == {"cheap": (1.0, 0.5), "strong": (2.5, 0.5)}
    ok = np.c_[WEAK, STRONG]
    out = ys.log_yardstick(ok, cost, scores={"estimator": SCORES}, policies={"orchestrator": {"b": (0.5, 0.75)}})
    assert out["axis"] == "share" and (out["strong"], out["cheapest"]) == (1, 0)
    f = out["figures"]
    assert f["yardstick_apgr_estimator"] == pytest.approx(0.75)
    assert f["yardstick_cpt50_estimator"] == pytest.approx(0.25)
    assert f["yardstick_apgr_orchestrator"] == pytest.approx(((.25 + .75) / 4 + .75 / 2 - .25) / .5)
    assert "yardstick_apgr_oracle" in f and not any(k.endswith("_random") for k in f)
    three = ys.log_yardstick(np.array([[1, 1, 1], [0, 1, 1], [0, 0, 1], [0, 0, 0]]), np.array([[1.0, 2.0, 5.0]] * 4),
                             sweeps={"estimator": [(2.0, 0.5)]})
    assert three["axis"] == "usd" and (three["strong"], three["cheapest"]) == (2, 0)
    assert three["figures"]["yardstick_usd_apgr_estimator"] == pytest.approx(
        ys.points_curve([(0.25, 0.5)], 0.25, 0.75).apgr)


def test_same_numbers_as_routellms_loop():
    """RouteLLM's evaluation (benchmarks.py MMLU.evaluate, evaluate.py generate_results) rewritten with pandas."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(1)
    strong, weak, scores = rng.random(200) < 0.8, rng.random(200) < 0.55, rng.random(200)
    _, edges = pd.qcut(scores, 10, retbins=True)
    rows = []
    for i, t in enumerate(edges):
        sel = scores >= t if i != len(edges) - 1 else scores > t
        rows.append({"strong_percentage": sel.mean() * 100, "accuracy": np.where(sel, strong, weak).mean() * 100})
    df = pd.DataFrame(rows).sort_values(by=["strong_percentage"])
    w_acc, s_acc = weak.mean() * 100, strong.mean() * 100
    auc = ys.trapezoid(df["accuracy"], df["strong_percentage"] / 100)
    apgr = (auc - w_acc) / (s_acc - w_acc)  # the covered share is 0..1 here
    cpts = [np.interp(g * (s_acc - w_acc) + w_acc, df["accuracy"], df["strong_percentage"]) for g in ys.GAPS]
    c = ys.score_curve(strong, weak, scores)
    assert c.auc == pytest.approx(auc / 100)
    assert c.apgr == pytest.approx(apgr)
    assert [100 * c.cpt(g) for g in ys.GAPS] == pytest.approx(cpts)
    with pytest.raises(ValueError, match="unique"):  # RouteLLM stops on tied edges; we keep them (docstring)
        pd.qcut([0.5, 0.5, 0.5, 0.9], 10, retbins=True)


def test_plot_yardstick_writes_a_png(tmp_path):
    from orchestra.eval.plots import plot_yardstick

    out = ys.log_yardstick(np.c_[WEAK, STRONG], np.array([[1.0, 5.0]] * 4), scores={"estimator": SCORES},
                           policies={"orchestrator": {"balanced": (0.5, 0.75)}})
    path = plot_yardstick(out["curves"], tmp_path / "yardstick.png", out["axis"])
    assert path.is_file() and path.stat().st_size > 1000


def test_cpt_on_a_flat_run_and_a_dip():
    # flat at the target: np.interp (RouteLLM) gives the last share of the run, first_reach the first
    c = ys.points_curve([(0.2, 0.5), (0.4, 0.5), (0.6, 0.75)], 0.25, 0.75, anchor=False)
    assert c.cpt(0.5) == pytest.approx(0.4) and c.cpt_first(0.5) == pytest.approx(0.2)
    # a dip: the first crossing is still the smallest share; np.interp's value is whatever it is
    d = ys.points_curve([(0.2, 0.6), (0.4, 0.4), (0.6, 0.7)], 0.25, 0.75)
    assert not d.monotone
    assert d.cpt_first(0.5) == pytest.approx(0.2 * 0.25 / 0.35)
    assert math.isnan(ys.points_curve([(0.5, 0.5)], 0.25, 0.75, anchor=False).cpt_first(0.8))
    # on the rising hand-made curve both agree where it is not flat at the target
    s = ys.score_curve(STRONG, WEAK, SCORES)
    assert [s.cpt_first(g) for g in (0.2, 0.8)] == pytest.approx([s.cpt(g) for g in (0.2, 0.8)])


def test_cluster_evaluate_hook_on_the_shipped_routing_log(tmp_path, capsys):
    """cluster/evaluate.py `yardstick` on the example log (24 questions, two models; 4 held out): recorded
    outcomes, a stand-in estimator router's scores and an orchestrator's episodes become curves, a JSON and a PNG."""
    from pathlib import Path
    from types import SimpleNamespace

    from cluster.evaluate import heldout_tasks
    from cluster.routing_log import main as import_log
    from cluster.yardstick import yardstick
    from orchestra.config import load_config

    example = Path(__file__).resolve().parents[3] / "examples" / "routing_log.csv"
    assert import_log([str(example), "--out", str(tmp_path / "log")]) == 0
    cfg = load_config([f"experiment={tmp_path / 'log' / 'experiment.yaml'}"])
    tasks, _ = heldout_tasks(cfg, "", 4)

    class Router:  # what the hook asks of an EstimatorRouter: its single-call plans and threshold margins
        def single_call_plans(self, tiers):
            assert tiers == ["answer-1", "answer-2"]  # [strong (the priciest), weak]
            return tiers

        def pick_single(self, task, plans, threshold):
            return SimpleNamespace(margin=float(len(task.problem)), tier=plans[0])

        def script(self, task):
            return []

    records = [{"policy": "orchestrator", "preference": pref, "seed": 0, "task_id": t.id, "correct": True,
                "tool_counts": {tier: 1}} for pref, tier in (("accuracy-first", "answer-1"), ("cost-first", "answer-1"))
               for t in tasks]
    figures = yardstick(cfg, tasks, records, {"estimator": Router().script}, tmp_path / "eval")
    assert {"yardstick_apgr_estimator", "yardstick_cpt50_estimator", "yardstick_cpt80_estimator",
            "yardstick_apgr_orchestrator", "yardstick_apgr_oracle"} <= set(figures)
    report = json.loads((tmp_path / "eval" / "yardstick.json").read_text())
    assert report["axis"] == "share" and report["n_questions"] == 4 and report["strong"] == "answer-1"
    assert report["operating_points"]["orchestrator"]["accuracy-first"] == [1.0, 1.0]
    assert report["curves"]["random"]["apgr"] == pytest.approx(0.5)
    assert (tmp_path / "eval" / "yardstick.png").is_file()
    assert "INFO yardstick estimator (4 questions" in capsys.readouterr().out
