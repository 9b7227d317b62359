"""Choosing the estimator router's P(correct) model per run: k-fold cross-validation on the training tasks.

Candidates (every one fitted per plan on the same task features as orchestra/routing/estimator.py):
  logistic  L2-regularised logistic regression, `C` over a small grid, with or without the one-hot meta fields
            (family / subject) when the features carry them;
  knn       the smoothed mean outcome of the `k` nearest training tasks by cosine similarity of the embedding
            (plus one per shared meta value when `knn_meta`; tasks tied with the k-th all count):
            (Σ outcomes + s·prior) / (Σ episodes + s), the prior being the plan's mean over all training tasks
            and s = `KNN_STRENGTH`. LLMRouterBench found kNN routers competitive with learned ones; they need no
            fitting and follow local structure a linear boundary cannot.
  blend     the mean of the best logistic and the best kNN candidate's probabilities (scored on the same
            out-of-fold predictions): the kNN part estimates every plan on the same neighbours, so differences
            between plans are paired, which the routing choice is about.
The score is the log-loss of P(correct) over every held-out (task, plan) outcome: a proper score, so the choice
also calibrates (a C that gives over-confident probabilities loses). `criterion="routing"` scores what the router
does with the probabilities instead (`routing_value`): on each held-out task the plan of highest P(correct) − w·$
for a sweep of $ weights w, credited with its recorded outcome minus w·its recorded $. Log-loss does not see
routing: on MMLU-Pro a kNN that routed best scored the same log-loss as the logistic model chosen. Folds are by
task (several seeds of a task stay together) and drawn from a fixed seed, so a run's choice is deterministic. Too few tasks to cross-validate
(< MIN_TASKS) leave the caller's fixed logistic regression in place. The ridge strength of the $ and seconds
regressions is chosen the same way (`choose_alpha`: squared error relative to each plan's mean square).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# C above 3 never won on RouterArena or MMLU-Pro (400-650 tasks, 384-d embeddings: nearly separable there, so
# lbfgs also runs long): left out
GRID_C = (0.1, 0.3, 1.0, 3.0)
GRID_K = (5, 10, 20, 40, 80)
# ridge strengths for $ and seconds, strongest first (ties, e.g. a constant target, keep the plan's mean): a weak
# ridge on MiniLM embeddings was measured to predict negative $ for the priciest plan on MMLU-Pro questions
GRID_ALPHA = (1e4, 100.0, 10.0, 1.0, 0.1)
KNN_STRENGTH = 1.0  # pseudo-episodes of the plan's overall rate mixed into every neighbourhood mean
MIN_TASKS = 20
EPS = 1e-6  # log-loss clip: one confident miss should cost a lot, not infinity
# the routing criterion's $ weights, per unit of the priciest plan's mean $: 0 (accuracy alone), then quarter
# decades from 0.01 (a nearly free plan ladder) to 10 (the cheapest plan almost always): the range a cost sweep spans
ROUTING_WEIGHTS = (0.0,) + tuple(10.0 ** (e / 4) for e in range(-8, 5))
CRITERIA = ("log_loss", "routing")


@dataclass(frozen=True)
class Candidate:
    kind: str  # logistic | knn | blend (the mean of a logistic and a kNN candidate's probabilities)
    C: float = 1.0
    k: int = 0
    meta: bool = True  # the logistic part uses the meta one-hots (when the features have any)
    knn_meta: bool = True  # the kNN part counts shared meta values in its similarity

    @property
    def name(self) -> str:
        logistic = f"logistic C={self.C:g}{'' if self.meta else ', no meta'}"
        knn = f"knn k={self.k}{'' if self.knn_meta else ', no meta'}"
        return logistic if self.kind == "logistic" else knn if self.kind == "knn" else f"blend of {logistic} + {knn}"


@dataclass
class PlanData:
    """What P(correct) is fitted on, per plan j: sample rows[j] (indices into the task features) and outcomes
    y[j] (0/1); and per task and plan the sum and count of outcomes, which kNN averages."""

    rows: list[np.ndarray]
    y: list[np.ndarray]
    sums: np.ndarray  # [tasks, plans]
    counts: np.ndarray  # [tasks, plans]


def plan_data(n_tasks: int, rows: Sequence[Sequence[int]], y: Sequence[Sequence[float]]) -> PlanData:
    P = len(rows)
    sums, counts = np.zeros((n_tasks, P)), np.zeros((n_tasks, P))
    for j in range(P):
        np.add.at(sums[:, j], np.asarray(rows[j], dtype=int), np.asarray(y[j], dtype=float))
        np.add.at(counts[:, j], np.asarray(rows[j], dtype=int), 1.0)
    return PlanData([np.asarray(r, dtype=int) for r in rows], [np.asarray(v, dtype=float) for v in y], sums, counts)


# ---------------------------------------------------------------- the two model kinds
def fit_logistic(X: np.ndarray, y: np.ndarray, C: float, model: object | None = None) -> tuple[np.ndarray, float, object]:
    """(weights, bias, the fitted sklearn model) of one plan; a plan whose outcome never varies gets the smoothed
    constant (k + 1) / (n + 2) as its bias. `model`: a previous fit to warm-start from (a grid of C in order)."""
    from sklearn.linear_model import LogisticRegression

    if y.min() == y.max():
        p = (y.sum() + 1.0) / (len(y) + 2.0)
        return np.zeros(X.shape[1]), float(np.log(p / (1 - p))), None
    m = model if model is not None else LogisticRegression(max_iter=1000, warm_start=True)
    m.set_params(C=C)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lbfgs at the grid's weakest penalty may stop a hair short: fine here
        m.fit(X, y)
    return m.coef_[0].copy(), float(m.intercept_[0]), m


def similarity(Xq: np.ndarray, Xt: np.ndarray, n_meta: int, meta: bool) -> np.ndarray:
    """[queries, train] cosine similarity of the embedding columns, plus one per shared meta one-hot."""
    d = Xq.shape[1] - n_meta
    eq, et = Xq[:, :d], Xt[:, :d]
    eq = eq / np.maximum(np.linalg.norm(eq, axis=1, keepdims=True), 1e-12)
    et = et / np.maximum(np.linalg.norm(et, axis=1, keepdims=True), 1e-12)
    s = eq @ et.T
    if meta and n_meta:
        s = s + Xq[:, d:] @ Xt[:, d:].T
    return s


def knn_predict(Xq: np.ndarray, Xt: np.ndarray, sums: np.ndarray, counts: np.ndarray, prior: np.ndarray,
                ks: Sequence[int], n_meta: int, meta: bool) -> dict[int, np.ndarray]:
    """k -> [queries, plans] smoothed means over the k nearest training tasks, for every k in `ks` from one
    similarity matrix. Tasks tied with the k-th nearest all count (no arbitrary order decides who is in:
    features with repeated values, such as a family one-hot, tie often)."""
    sim = similarity(Xq, Xt, n_meta, meta)
    ranked = -np.sort(-sim, axis=1)
    out = {}
    for k in ks:
        kth = ranked[:, min(k, len(Xt)) - 1:min(k, len(Xt))]
        near = (sim >= kth - 1e-12).astype(np.float64)  # [queries, train]
        out[k] = (near @ sums + KNN_STRENGTH * prior) / (near @ counts + KNN_STRENGTH)
    return out


def plan_prior(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    tot = counts.sum(axis=0)
    return np.where(tot > 0, (sums.sum(axis=0) + 1.0) / (tot + 2.0), 0.5)


# ---------------------------------------------------------------- cross-validation
def candidates(n_meta: int, n_train: int, grid_c: Sequence[float] = GRID_C, grid_k: Sequence[int] = GRID_K
               ) -> list[Candidate]:
    metas = (True, False) if n_meta else (True,)
    ks = [k for k in grid_k if k < n_train] or [max(1, n_train - 1)]
    return ([Candidate("logistic", C=c, meta=m) for m in metas for c in grid_c]
            + [Candidate("knn", k=k, knn_meta=m) for m in metas for k in ks])


def folds_of(n: int, folds: int, seed: int) -> np.ndarray:
    """Each task's fold: a seeded permutation cut into `folds` near-equal parts."""
    fold_of = np.empty(n, dtype=int)
    fold_of[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return fold_of


def routing_value(p_hat: np.ndarray, correct: np.ndarray, cost: np.ndarray,
                  weights: Sequence[float] = ROUTING_WEIGHTS) -> float:
    """Mean over the $ weights w of the mean over tasks of (recorded outcome − w·recorded $) of the plan with the
    highest P̂ − w·$; all three [tasks, plans] ($ per task as recorded: every candidate is judged with the same
    $, so only its probabilities differ). $ are in units of the priciest plan's mean."""
    scale = max(float(np.max(cost.mean(axis=0))), 1e-300)
    c, rows = cost / scale, np.arange(len(cost))
    values = []
    for w in weights:
        pick = np.argmax(p_hat - w * c, axis=1)
        values.append(float(np.mean(correct[rows, pick] - w * c[rows, pick])))
    return float(np.mean(values))


def cross_validate(X: np.ndarray, data: PlanData, n_meta: int, folds: int = 5, seed: int = 0,
                   grid_c: Sequence[float] = GRID_C, grid_k: Sequence[int] = GRID_K, criterion: str = "log_loss",
                   cost: np.ndarray | None = None) -> tuple[Candidate, dict[str, dict[str, float]]]:
    """(the chosen candidate, {candidate name: {log_loss, brier[, routing]}}): log-loss and Brier per held-out
    outcome, averaged over plans and tasks; `routing` (with `cost`, [tasks, plans] mean recorded $) the
    `routing_value` of the out-of-fold probabilities on the tasks where every plan was played. The grid's
    candidates, then the blend of the best logistic and the best kNN one, scored on the same out-of-fold
    predictions. `criterion`: log_loss (lowest wins) or routing (highest wins, then the lower log-loss). Ties: the
    earlier candidate."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if criterion == "routing" and cost is None:
        raise ValueError("criterion='routing' needs each task's recorded $ per plan (cost)")
    n, d = X.shape[0], X.shape[1] - n_meta
    fold_of = folds_of(n, folds, seed)
    cands = candidates(n_meta, n - n // folds, grid_c, grid_k)
    oof = {c: [np.zeros(len(r)) for r in data.rows] for c in cands}  # out-of-fold P(correct) per plan sample
    ks = sorted({c.k for c in cands if c.kind == "knn"})
    for f in range(folds):
        train, test = np.flatnonzero(fold_of != f), np.flatnonzero(fold_of == f)
        test_pos = np.full(n, -1)
        test_pos[test] = np.arange(len(test))
        for meta in sorted({c.meta for c in cands}, reverse=True):
            cols = X if meta else X[:, :d]
            knn = knn_predict(X[test], X[train], data.sums[train], data.counts[train],
                              plan_prior(data.sums[train], data.counts[train]), ks, n_meta, meta)
            for j, (rows, y) in enumerate(zip(data.rows, data.y, strict=True)):
                in_train, in_test = fold_of[rows] != f, fold_of[rows] == f
                if not in_test.any():
                    continue
                model = None
                for c in (c for c in cands if c.kind == "logistic" and c.meta == meta):  # ascending C: warm starts
                    w, b, model = fit_logistic(cols[rows[in_train]], y[in_train], c.C, model)
                    oof[c][j][in_test] = 1.0 / (1.0 + np.exp(-(cols[rows[in_test]] @ w + b)))
                for c in (c for c in cands if c.kind == "knn" and c.knn_meta == meta):
                    oof[c][j][in_test] = knn[c.k][test_pos[rows[in_test]], j]
    full = np.flatnonzero((data.counts > 0).all(axis=1))  # tasks on which every plan was played
    correct = data.sums[full] / data.counts[full]
    if criterion == "routing" and not len(full):
        raise ValueError("criterion='routing' needs tasks on which every plan was played (explore every plan on "
                         "each task, router.explore_tasks)")

    def score(p: list[np.ndarray]) -> dict[str, float]:
        out = _scores(p, data.y)
        if cost is not None and len(full):
            out["routing"] = routing_value(_per_task(p, data, n)[full], correct, cost[full])
        return out

    def rank(c: Candidate) -> tuple[float, float]:  # lower is better
        sc = scores[c.name]
        return (-sc["routing"], sc["log_loss"]) if criterion == "routing" else (sc["log_loss"], 0.0)

    scores = {c.name: score(oof[c]) for c in cands}
    best_l = min((c for c in cands if c.kind == "logistic"), key=rank)
    best_k = min((c for c in cands if c.kind == "knn"), key=rank)
    blend = Candidate("blend", C=best_l.C, k=best_k.k, meta=best_l.meta, knn_meta=best_k.knn_meta)
    scores[blend.name] = score([(a + b) / 2 for a, b in zip(oof[best_l], oof[best_k], strict=True)])
    cands.append(blend)
    best = min(cands, key=rank)  # min keeps the first of equal scores
    return best, scores


def _per_task(p: Sequence[np.ndarray], data: PlanData, n: int) -> np.ndarray:
    """[tasks, plans] mean of the per-sample predictions (a task's samples share one prediction: one fold)."""
    out = np.zeros((n, len(p)))
    for j, (rows, pj) in enumerate(zip(data.rows, p, strict=True)):
        np.add.at(out[:, j], rows, pj)
    return out / np.maximum(data.counts, 1.0)


def _scores(p: Sequence[np.ndarray], y: Sequence[np.ndarray]) -> dict[str, float]:
    """Mean log-loss and Brier score over every (plan, sample) outcome."""
    pp, yy = np.clip(np.concatenate(list(p)), EPS, 1 - EPS), np.concatenate(list(y))
    return {"log_loss": float(-np.mean(yy * np.log(pp) + (1 - yy) * np.log(1 - pp))),
            "brier": float(np.mean((pp - yy) ** 2))}


def choose_alpha(X: np.ndarray, rows: Sequence[np.ndarray], targets: Sequence[np.ndarray], folds: int = 5,
                 seed: int = 0, grid: Sequence[float] = GRID_ALPHA) -> tuple[float, dict[str, float]]:
    """(the ridge strength with the lowest cross-validated squared error, summed over plans each relative to its
    target's mean square, {alpha: that error}); folds by task as in `cross_validate`."""
    from sklearn.linear_model import Ridge

    fold_of = folds_of(X.shape[0], folds, seed)
    err = dict.fromkeys(grid, 0.0)
    for r, y in zip(rows, targets, strict=True):
        scale = max(float(np.mean(y ** 2)), 1e-300)
        for f in range(folds):
            tr, te = fold_of[r] != f, fold_of[r] == f
            if not te.any() or not tr.any():
                continue
            for a in grid:
                pred = Ridge(alpha=a).fit(X[r[tr]], y[tr]).predict(X[r[te]])
                err[a] += float(np.sum((pred - y[te]) ** 2)) / scale / len(y)
    best = min(grid, key=lambda a: err[a])  # min keeps the first (strongest) of equal errors
    return float(best), {f"{a:g}": v for a, v in err.items()}
