"""Per-run model selection of the estimator router (orchestra/routing/select.py): cross-validation picks kNN where
neighbours decide the outcome and logistic regression where a linear boundary does, uses the meta one-hots when
they carry the signal, is deterministic, and both kinds survive save and load; files written before the
selection existed still load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orchestra.routing.estimator import RouteEstimator, TaskFeatures
from orchestra.routing.plans import Outcome, Plan
from orchestra.types import Task

A = Plan("answer-1", (("answer", "answer-1"),))
B = Plan("answer-2", (("answer", "answer-2"),))


def outcomes_from(p_a: np.ndarray, seed: int) -> tuple[list[str], list[Outcome]]:
    """Plan A right with probability p_a per task, plan B right half the time everywhere."""
    rng = np.random.default_rng(seed)
    ids = [f"t{i}" for i in range(len(p_a))]
    out = [Outcome(t, "answer-1", bool(rng.random() < p), 0.02, 1.0) for t, p in zip(ids, p_a, strict=True)]
    out += [Outcome(t, "answer-2", bool(rng.random() < 0.5), 0.001, 1.0) for t in ids]
    return ids, out


def sectors(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Points on a circle; plan A is right in alternate eighths of it: no line separates them, neighbours do."""
    theta = np.random.default_rng(seed).uniform(0, 2 * np.pi, n)
    X = np.column_stack([np.cos(theta), np.sin(theta)])
    return X, np.where((theta // (np.pi / 4)) % 2 == 0, 0.95, 0.05)


def linear(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian features; P(A right) a logistic function of one of them: the logistic model is the true one."""
    X = np.random.default_rng(seed).normal(size=(n, 6))
    return X, 1.0 / (1.0 + np.exp(-2.5 * X[:, 0]))


def test_cross_validation_picks_knn_where_neighbours_decide():
    X, p = sectors(240)
    ids, outs = outcomes_from(p, 1)
    est = RouteEstimator([A, B]).fit(X, ids, outs)
    assert est.model["kind"] == "knn"
    scores = est.selection["scores"]
    best_logistic = min(v["log_loss"] for k, v in scores.items() if k.startswith("logistic"))
    assert scores[est.selection["chosen"]]["log_loss"] < best_logistic - 0.1
    Xq, pq = sectors(200, seed=7)  # fresh points: the kNN estimate follows the sectors (blurred at their edges)
    got = est.expected(Xq).p_correct[:, 0]
    assert np.mean((got > 0.5) == (pq > 0.5)) > 0.85


def test_cross_validation_picks_logistic_where_a_line_decides():
    X, p = linear(240)
    ids, outs = outcomes_from(p, 2)
    est = RouteEstimator([A, B]).fit(X, ids, outs)
    assert est.model["kind"] == "logistic"
    assert est.coef["acc_w"][0, 0] > 1.0 and np.all(np.abs(est.coef["acc_w"][0, 1:]) < 0.6)


def test_meta_one_hots_are_kept_when_they_carry_the_outcome():
    """The family (a one-hot at the end of each row) decides; the embedding is noise."""
    rng = np.random.default_rng(3)
    fams = [f"f{i % 4}" for i in range(200)]
    tasks = [Task(id=f"t{i}", category="qa", problem=f"q{i}", answer="x", data_source="toy", meta={"family": f})
             for i, f in enumerate(fams)]
    noise = rng.normal(size=(200, 8))
    feats = TaskFeatures(lambda texts: noise[[int(t[1:]) for t in texts]], ["family"]).fit_vocab(tasks)
    assert feats.n_meta == 4
    p = np.array([0.9 if f in ("f0", "f2") else 0.1 for f in fams])
    ids, outs = outcomes_from(p, 4)
    est = RouteEstimator([A, B]).fit(feats(tasks), ids, outs, n_meta=feats.n_meta)
    assert est.model["meta"] is True and est.model["n_meta"] == 4
    assert all(("no meta" in k) for k, _ in sorted(est.selection["scores"].items(), key=lambda kv: kv[1]["log_loss"])
               [-3:])  # the worst candidates are the ones without the family
    np.testing.assert_allclose(est.expected(feats(tasks[:2])).p_correct[:, 0], [0.9, 0.1], atol=0.12)


def test_selection_is_deterministic_and_off_means_the_fixed_logistic():
    X, p = sectors(120)
    ids, outs = outcomes_from(p, 5)
    a, b = RouteEstimator([A, B]).fit(X, ids, outs), RouteEstimator([A, B]).fit(X, ids, outs)
    assert a.selection == b.selection
    fixed = RouteEstimator([A, B], C=3.0, select=False).fit(X, ids, outs)
    assert fixed.model["kind"] == "logistic" and fixed.model["C"] == 3.0 and fixed.selection["method"] == "fixed"
    few = RouteEstimator([A, B]).fit(X[:10], ids[:10], [o for o in outs if int(o.task_id[1:]) < 10])
    assert few.model["kind"] == "logistic" and "too few" in few.selection["why"]


@pytest.mark.parametrize("data", [sectors, linear])
def test_both_kinds_survive_save_and_load(tmp_path, data):
    X, p = data(160)
    ids, outs = outcomes_from(p, 6)
    est = RouteEstimator([A, B]).fit(X, ids, outs)
    est.save(tmp_path)
    again, meta = RouteEstimator.load(tmp_path)
    assert again.model == est.model and meta["selection"]["chosen"] == est.selection["chosen"]
    assert set(meta["selection"]["scores"]) == set(est.selection["scores"])
    Xq = data(30, seed=9)[0]
    for f in ("p_correct", "cost_usd", "latency_s"):
        np.testing.assert_allclose(getattr(again.expected(Xq), f), getattr(est.expected(Xq), f))
    with np.load(tmp_path / "estimator.npz", allow_pickle=False) as z:  # plain arrays: loading runs no code
        assert all(z[k].dtype != object for k in z.files)


def test_a_router_file_from_before_the_selection_still_loads(tmp_path):
    """What the previous version wrote: no `model` / `selection` in the JSON, logistic coefficients only."""
    rng = np.random.default_rng(0)
    coef = {"acc_w": rng.normal(size=(2, 3)), "acc_b": np.array([0.1, -0.2]), "cost_w": np.zeros((2, 3)),
            "cost_b": np.array([0.02, 0.001]), "lat_w": np.zeros((2, 3)), "lat_b": np.array([1.0, 1.0])}
    np.savez(tmp_path / "estimator.npz", **coef)
    (tmp_path / "estimator.json").write_text(json.dumps({
        "plans": [{"name": "answer-1", "calls": [["answer", "answer-1"]]},
                  {"name": "answer-2", "calls": [["answer", "answer-2"]]}],
        "C": 1.0, "alpha": 1.0, "n_train": 50, "features": {"kind": "minilm", "meta_keys": []}}))
    est, meta = RouteEstimator.load(tmp_path)
    assert est.model["kind"] == "logistic" and est.selection == {} and meta["n_train"] == 50
    Xq = rng.normal(size=(4, 3))
    want = 1.0 / (1.0 + np.exp(-(Xq @ coef["acc_w"].T + coef["acc_b"])))
    np.testing.assert_allclose(est.expected(Xq).p_correct, want)
    np.testing.assert_allclose(est.expected(Xq).cost_usd, np.tile([0.02, 0.001], (4, 1)))


def test_a_knn_file_missing_its_arrays_is_refused(tmp_path):
    X, p = sectors(160)
    ids, outs = outcomes_from(p, 1)
    est = RouteEstimator([A, B]).fit(X, ids, outs)
    assert est.model["kind"] == "knn"
    est.coef.pop("knn_sum")
    est.save(tmp_path)
    with pytest.raises(ValueError, match="knn_sum"):
        RouteEstimator.load(tmp_path)


def test_a_blend_is_the_mean_of_its_parts_and_survives_save_and_load(tmp_path):
    X, p = sectors(160)
    ids, outs = outcomes_from(p, 1)
    est = RouteEstimator([A, B]).fit(X, ids, outs)
    assert est.model["kind"] == "knn" and any(k.startswith("blend of") for k in est.selection["scores"])
    knn = est.p_correct(X[:5])
    est.model.update(kind="blend", parts=["logistic", "knn"])  # a kNN fit's logistic part is all zeros: P = 0.5
    np.testing.assert_allclose(est.p_correct(X[:5]), (knn + 0.5) / 2)
    est.save(tmp_path)
    again, _ = RouteEstimator.load(tmp_path)
    np.testing.assert_allclose(again.p_correct(X[:5]), (knn + 0.5) / 2)


def test_a_blend_file_from_before_the_family_kind_loads_as_logistic_plus_knn(tmp_path):
    X, p = sectors(160)
    ids, outs = outcomes_from(p, 1)
    est = RouteEstimator([A, B]).fit(X, ids, outs)
    knn = est.p_correct(X[:5])
    est.model.update(kind="blend")
    del est.model["parts"]  # what the previous version wrote
    est.save(tmp_path)
    again, _ = RouteEstimator.load(tmp_path)
    np.testing.assert_allclose(again.p_correct(X[:5]), (knn + 0.5) / 2)


def families(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    """Embeddings that are pure noise and a 4-valued family one-hot that sets P(A right): only the family tells."""
    rng = np.random.default_rng(seed)
    fam = rng.integers(0, 4, n)
    X = np.hstack([rng.normal(size=(n, 8)), np.eye(4)[fam]])
    return X, np.array([0.9, 0.1, 0.7, 0.3])[fam], 4


def test_family_means_by_hand():
    """Two families; the query of family 0 averages the two family-0 tasks, smoothed by s pseudo-episodes of the
    prior; a query of a family no training task has gets all of them (the prior, smoothed)."""
    from orchestra.routing.select import family_predict

    Xt = np.array([[0.3, 1, 0], [-0.2, 1, 0], [0.9, 0, 1]])
    sums, counts = np.array([[1.0], [0.0], [2.0]]), np.array([[1.0], [2.0], [2.0]])
    prior = np.array([0.5])
    Xq = np.array([[5.0, 1, 0], [1.0, 0, 0]])
    got = family_predict(Xq, Xt, sums, counts, prior, [1.0, 5.0], n_meta=2)
    np.testing.assert_allclose(got[1.0][:, 0], [(1 + 0.5) / (3 + 1), (3 + 0.5) / (5 + 1)])
    np.testing.assert_allclose(got[5.0][:, 0], [(1 + 2.5) / (3 + 5), (3 + 2.5) / (5 + 5)])


def test_selection_uses_the_family_where_only_the_family_tells_and_it_survives_save_and_load(tmp_path):
    X, p, n_meta = families(240)
    ids, outs = outcomes_from(p, 4)
    est = RouteEstimator([A, B]).fit(X, ids, outs, n_meta=n_meta)
    assert "family" in est.model["parts"], est.selection["chosen"]
    assert any(k.startswith("family s=") for k in est.selection["scores"])
    assert any(k.startswith("blend of") and "family" in k for k in est.selection["scores"])
    Xq, pq, _ = families(100, seed=3)
    got = est.expected(Xq).p_correct[:, 0]
    assert np.corrcoef(got, pq)[0, 1] > 0.9
    est.save(tmp_path)
    again, _ = RouteEstimator.load(tmp_path)
    np.testing.assert_allclose(again.p_correct(Xq), est.p_correct(Xq))


def test_no_meta_columns_means_no_family_candidate():
    X, p = sectors(120)
    ids, outs = outcomes_from(p, 1)
    est = RouteEstimator([A, B]).fit(X, ids, outs)
    assert not any("family" in k for k in est.selection["scores"])


def test_routing_value_by_hand():
    """Two tasks, two plans; plan 0 costs 1 (the priciest mean), plan 1 costs 0.1. At w = 0 the higher P̂ wins, at
    w = 1 the cheap plan wins wherever P̂ differs by less than 0.9."""
    from orchestra.routing.select import routing_value

    p_hat = np.array([[0.9, 0.2], [0.6, 0.5]])
    correct = np.array([[1.0, 0.0], [0.0, 1.0]])
    cost = np.array([[1.0, 0.1], [1.0, 0.1]])
    # w=0: picks 0, 0 -> (1 + 0) / 2; w=1: task 0: 0.9-1 < 0.2-0.1 -> plan 1 (0 - 0.1), task 1: plan 1 (1 - 0.1)
    assert routing_value(p_hat, correct, cost, weights=(0.0,)) == pytest.approx(0.5)
    assert routing_value(p_hat, correct, cost, weights=(1.0,)) == pytest.approx((-0.1 + 0.9) / 2)
    assert routing_value(p_hat, correct, cost, weights=(0.0, 1.0)) == pytest.approx((0.5 + 0.4) / 2)
    assert routing_value(p_hat, correct, 10 * cost, weights=(1.0,)) == pytest.approx(0.4)  # $ in units of the priciest


def test_routing_criterion_scores_every_candidate_and_picks_the_best_router():
    X, p = sectors(240)
    ids, outs = outcomes_from(p, 1)
    est = RouteEstimator([A, B], select_by="routing").fit(X, ids, outs)
    scores = est.selection["scores"]
    assert all("routing" in v for v in scores.values())
    assert scores[est.selection["chosen"]]["routing"] == max(v["routing"] for v in scores.values())
    assert "routing" in est.selection["method"] and est.model["kind"] in ("knn", "blend")
    with pytest.raises(ValueError, match="select_by"):
        RouteEstimator([A, B], select_by="accuracy")
    from orchestra.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="router.select_by.*log_loss, routing"):
        load_config(["router.select_by=accuracy"])
    assert load_config(["router.select_by=routing"]).router.select_by == "routing"


def test_meta_one_hots_stay_unless_leaving_them_out_wins_by_more_than_one_standard_error():
    """A family one-hot that carries nothing. Where a line decides, leaving it out wins by noise: the one-SE rule
    keeps the configured one-hots and says so. Where the circle's sectors decide, the one-hot (+1 similarity per
    shared family) splits every kNN neighbourhood: leaving it out wins clearly and stands."""
    from orchestra.routing.select import Candidate, uses_meta

    noise = np.eye(4)[np.random.default_rng(5).integers(0, 4, 240)]
    X, p = linear(240)
    ids, outs = outcomes_from(p, 2)
    est = RouteEstimator([A, B]).fit(np.hstack([X, noise]), ids, outs, n_meta=4)
    sc = est.selection["scores"]
    plain_best = min(sc, key=lambda k: sc[k]["log_loss"])
    assert "no meta" in plain_best and est.model["meta"] and est.model["kind"] == "logistic"
    assert "within one standard error" in est.selection["rule"] and plain_best in est.selection["rule"]
    X, p = sectors(240)
    ids, outs = outcomes_from(p, 1)
    est = RouteEstimator([A, B]).fit(np.hstack([X, noise]), ids, outs, n_meta=4)
    assert est.model["kind"] == "knn" and not est.model["knn_meta"] and "rule" not in est.selection
    assert uses_meta(Candidate("blend", parts=("knn", "family"))) and not uses_meta(
        Candidate("blend", meta=False, parts=("logistic", "family")))
