"""SFT's check of the policy on training tasks (cluster/sft_check.py, sft.until_follows): the three presets and a
cost ladder off the sweep's weights, played once on training tasks and judged by the verdict's rule against the
run's own router on the same tasks: a fall the router makes must be followed, one it does not make is not asked."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from cluster.progress import Bars
from cluster.sft_check import RouterOnTasks, train_check
from orchestra.config import load_config
from orchestra.eval.verdict import Goals
from orchestra.preferences import CHECK_COSTS, SWEEP_COSTS, preset
from orchestra.types import Task
from tests.cluster.test_heldout import _played, _task

CFG = load_config(["eval.presets=[accuracy-first,balanced,cost-first]", "eval.n_tasks=3"])
TRAIN = [_task(i) for i in range(5)]


def weight_of(name: str) -> float:
    return float(name.split("=")[1]) if name.startswith("sweep:") else preset(name)["cost"]


def check(price, router_price=None, cfg=CFG):
    """A policy whose $ is price(its request's cost weight), and a router whose $ is router_price(weight)."""
    played = []

    def rollout(reqs, eval_mode, bar):
        assert eval_mode
        played.extend(reqs)
        return [_played(q["uid"], Task.from_dict(q["task"]), price(q["task"]["pref"]["cost"]), True) for q in reqs]

    router = (lambda vectors: {k: router_price(weight_of(k)) for k in vectors}) if router_price else None
    with Bars(Console(file=io.StringIO())) as bars:
        out = train_check(cfg, TRAIN, 7, rollout, bars, lambda: None, ["follows"], Goals(), router)
    assert len(played) == 3 * (3 + len(CHECK_COSTS)) and {q["task"]["id"] for q in played} == {"t0", "t1", "t2"}
    return SimpleNamespace(**out)


def falling(w: float) -> float:
    return 0.01 / (1 + 10 * w)


def test_the_check_follows_its_router_on_training_tasks():
    assert not set(CHECK_COSTS) & set(SWEEP_COSTS)
    follows = check(falling, falling)
    assert follows.passed and follows.monotone == 1 and follows.pref_spread > 3 and "against the run's router" in follows.line
    one_route = check(lambda w: 0.01, falling)
    assert not one_route.passed and "goal >= 3x" in one_route.below
    # the presets followed, the ladder's middle flat (what seed 0's warm start did at bd00958)
    price = {0.05: 0.01, 0.5: 0.003, 2.0: 0.001, **dict(zip(CHECK_COSTS, (0.006, 0.005, 0.005, 0.005, 0.005)))}
    flat = check(price.__getitem__, falling)
    assert not flat.passed and flat.monotone == 1
    assert f"cost ladder: from sweep:cost={CHECK_COSTS[0]:g} to sweep:cost={CHECK_COSTS[2]:g}" in flat.below


def test_each_rung_reads_beside_its_sweep_point():
    """One rung in each bin of the sweep, at nearly the same spot, never reading as it does (any number format)."""
    from orchestra.agent.prompt import level
    from orchestra.preferences import readings

    bins = load_config(["experiment=cpu_tiny"]).agent.preference_levels
    for rung, point in zip(CHECK_COSTS, SWEEP_COSTS, strict=True):
        assert level(rung, 1.0, bins) == level(point, 1.0, bins) and not readings(rung) & readings(point)
        assert 1 < rung / point < 10 ** 0.1  # on the bin's cheaper side, within a fifth of a level


def test_one_spend_over_three_bins_fails_where_its_router_falls():
    """Seed 2 at 6e00b2a: the same routes under "low", "medium" and "high", spending what the router spends at the
    dear end of "high"; rungs at each bin's dear end (0.07, 0.2, 0.6) excused it (at most its router's $ at each
    step's end), the held-out sweep's middle (0.3 -> 1) did not, nor does the ladder beside the sweep's points."""
    from orchestra.agent.prompt import level

    bins = load_config(["experiment=cpu_tiny"]).agent.preference_levels
    by_word = {"minimal": falling(0.02), "low": falling(0.6), "medium": falling(0.6), "high": falling(0.6),
               "top": falling(2.0)}

    def policy(w):
        return by_word[level(w, 1.0, bins)] if w not in (0.05, 0.5, 2.0) else falling(w)  # presets as their router

    found = check(policy, falling)
    assert not found.passed and f"sweep:cost={CHECK_COSTS[2]:g} to sweep:cost={CHECK_COSTS[3]:g}" in found.below


def test_a_fall_its_router_does_not_make_is_not_asked_of_sft():
    """The router sends balanced and cost-first (and the ladder's top) to one model: SFT that does the same passes
    (it ran on to sft.max_steps on a user's routing log at bd00958, 4x the time)."""
    def router(w):
        return 0.01 if w < 0.1 else 0.002

    assert check(router, router).passed
    assert not check(router, None).passed  # no router: each step must fall strictly


def test_the_router_plays_each_vector_once(monkeypatch):
    import cluster.sft_check as sc

    calls = []

    def records(cfg, run_dir, tasks, tools, tok, vectors):
        calls.append(sorted(vectors))
        return [{"preference": k, "cost_usd": weight_of(k)} for k in vectors]

    monkeypatch.setattr(sc, "router_records", records)
    router = RouterOnTasks(CFG, None, TRAIN, None, None)
    first = router({"balanced": preset("balanced"), "cost-first": preset("cost-first")})
    assert first == {"balanced": 0.5, "cost-first": 2.0}
    assert router({"balanced": preset("balanced")}) == {"balanced": 0.5} and len(calls) == 1
    monkeypatch.setattr(sc, "router_records", lambda *a: None)  # a run without a router
    assert RouterOnTasks(CFG, None, TRAIN, None, None)({"balanced": preset("balanced")}) is None


def test_the_check_judges_falls_as_sft_check_falls_says(monkeypatch):
    """cpu_tiny's check judges falls by their estimates (sft.check_falls: estimate); `interval`, as the verdict."""
    import cluster.sft_check as sc

    seen = []
    monkeypatch.setattr(sc, "train_check", lambda *args: seen.append(args[7]) or {})
    for cfg in (load_config(["experiment=cpu_tiny"]), load_config(["experiment=cpu_tiny", "sft.check_falls=interval"])):
        trainer = SimpleNamespace(cfg=cfg, dir=None, train=TRAIN, scripted=None, tokenizer=lambda: None,
                                  rollout=None, bars=None, sync_weights=None)
        sc.checker(trainer, ["follows"])(360)
    assert [g.by_estimate for g in seen] == [True, False] and seen[0].share == Goals().share
