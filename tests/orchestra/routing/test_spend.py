"""The estimator's $ and seconds models (orchestra/routing/spend.py): the linear form without text statistics, the
log form with them recovering a price-times-length $ the linear form cannot, the smearing factor making the mean
right, a plan that never spends, the floor, the ridge strength's selection, and save / load through the estimator
(a log-form file lacking its arrays is refused; a file from before the log form loads as the linear one)."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from orchestra.routing import spend
from orchestra.routing.estimator import RouteEstimator, TaskFeatures
from orchestra.routing.plans import Outcome, Plan
from orchestra.routing.text_stats import text_stats
from orchestra.types import Task

A = Plan("answer-1", (("answer", "answer-1"),))
B = Plan("answer-2", (("answer", "answer-2"),))
PRICE = {"answer-1": 2e-4, "answer-2": 1e-5}  # $ per word of question


def noise(texts: list[str]) -> np.ndarray:  # an embedding that says nothing about length
    return np.stack([np.random.default_rng(zlib.crc32(t.encode())).normal(size=8) for t in texts])


def tasks_of(n: int, seed: int) -> list[Task]:
    rng = np.random.default_rng(seed)
    return [Task(id=f"t{seed}-{i}", category="qa", problem=" ".join(f"w{j}" for j in range(int(w))), answer="x",
                 data_source="toy") for i, w in enumerate(rng.integers(2, 200, n))]


def spent(t: Task, plan: str, rng: np.random.Generator) -> float:
    """price x words x a lognormal factor (a model's verbosity): a product, as a call's $ is."""
    return PRICE[plan] * len(t.problem.split()) * float(np.exp(rng.normal(0.0, 0.2)))


def outcomes(tasks: list[Task], seed: int) -> list[Outcome]:
    rng = np.random.default_rng(seed)
    return [Outcome(t.id, p.name, bool(rng.random() < 0.5), spent(t, p.name, rng), 1.0 + 0.01 * len(t.problem))
            for t in tasks for p in (A, B)]


def test_with_statistics_the_log_form_predicts_what_the_linear_form_cannot():
    train, test = tasks_of(200, 0), tasks_of(100, 1)
    outs, truth = outcomes(train, 0), outcomes(test, 1)
    f = TaskFeatures(noise, text_stats=True)
    log = RouteEstimator([A, B]).fit(f(train), [t.id for t in train], outs, n_stats=f.n_stats)
    plain = TaskFeatures(noise)
    lin = RouteEstimator([A, B]).fit(plain(train), [t.id for t in train], outs)
    assert log.model["spend"] == "log" and lin.model["spend"] == "linear"
    assert log.selection["alpha_cost"]["scale"] == "log" and "scale" not in lin.selection["alpha_cost"]
    want = np.array([[o.cost_usd for o in truth if o.task_id == t.id] for t in test])
    err = {name: float(np.mean(((e.expected(x(test)).cost_usd - want) / want.mean(axis=0)) ** 2))
           for name, e, x in (("log", log, f), ("linear", lin, plain))}
    assert err["log"] < 0.1 < err["linear"]  # the embedding says nothing; the length says nearly all
    # the smearing factor: on the training tasks the mean prediction is the mean $ (a log fit's plain exp is low)
    got = log.expected(f(train)).cost_usd.mean(axis=0)
    mean = [np.mean([o.cost_usd for o in outs if o.plan == p.name]) for p in (A, B)]
    assert got == pytest.approx(mean, rel=0.05)
    assert (log.expected(f(test)).latency_s > 0).all()


def test_a_plan_that_never_spends_predicts_nothing_and_every_prediction_keeps_the_floor():
    rng = np.random.default_rng(3)
    X, S = rng.normal(size=(60, 4)), text_stats([" ".join(["w"] * int(k)) for k in rng.integers(1, 50, 60)])
    rows = [np.arange(60), np.arange(60)]
    targets = {"cost": [np.zeros(60), np.exp(rng.normal(size=60))], "lat": [np.ones(60), np.full(60, 2.0)]}
    coef, alpha, entries = spend.fit(X, S, rows, targets, 1.0, select=True, folds=3, seed=0)
    assert set(entries) == {"alpha_cost", "alpha_lat"} and alpha["cost"] in spend.GRID_ALPHA
    far = spend.predict(coef, "cost", 50 * rng.normal(size=(5, 4)), S[:5])
    assert far[:, 0] == pytest.approx(0.0, abs=1e-9) and (far[:, 1] >= targets["cost"][1].min()).all()
    assert spend.predict(coef, "lat", X, S) == pytest.approx(np.tile([1.0, 2.0], (60, 1)))
    with pytest.raises(ValueError, match="reads text statistics"):
        spend.predict(coef, "cost", X, None)
    lin, alpha, entries = spend.fit(X, None, rows, targets, 7.0, select=False, folds=3, seed=0)
    assert "ridge_mu" not in lin and alpha == {"cost": 7.0, "lat": 7.0} and entries == {}


def test_save_and_load_keep_the_log_form_and_refuse_a_file_without_its_arrays(tmp_path):
    train = tasks_of(80, 2)
    f = TaskFeatures(noise, text_stats=True)
    est = RouteEstimator([A, B]).fit(f(train), [t.id for t in train], outcomes(train, 2), n_stats=f.n_stats)
    est.save(tmp_path / "r")
    back, _ = RouteEstimator.load(tmp_path / "r")
    Xq = f(tasks_of(10, 3))
    assert back.expected(Xq).cost_usd == pytest.approx(est.expected(Xq).cost_usd)
    with np.load(tmp_path / "r" / "estimator.npz") as z:
        kept = {k: z[k] for k in z.files if k != "cost_smear"}
    np.savez(tmp_path / "r" / "estimator.npz", **kept)
    with pytest.raises(ValueError, match="lacks.*cost_smear"):
        RouteEstimator.load(tmp_path / "r")


def test_a_file_from_before_the_log_form_loads_as_the_linear_one(tmp_path):
    train = tasks_of(80, 4)
    plain = TaskFeatures(noise)
    est = RouteEstimator([A, B]).fit(plain(train), [t.id for t in train], outcomes(train, 4))
    est.save(tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "estimator.json").read_text())
    del meta["model"]["spend"]
    (tmp_path / "r" / "estimator.json").write_text(json.dumps(meta))
    back, _ = RouteEstimator.load(tmp_path / "r")
    Xq = plain(tasks_of(10, 5))
    assert back.expected(Xq).cost_usd == pytest.approx(est.expected(Xq).cost_usd)
