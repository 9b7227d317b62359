"""The estimator router's $ and seconds models (orchestra/routing/estimator.py): per plan, a ridge regression of
what the plan spent on a task's features, floored at the plan's least training value (a weak ridge on MiniLM
embeddings was measured to predict negative $ for the priciest MMLU-Pro model, which made it look free).

Two forms, set by the features:
  linear  without text statistics: $ = x·w + b over the embedding and meta one-hots;
  log     with them (`router.text_stats`): log($ + ε) = [x, z]·w + b, z the statistics standardised on the
          training tasks, ε 1 % of the plan's mean $, mapped back by Duan's smearing factor (the mean of
          exp(residual) on the training tasks, so the prediction is a mean, not a median).
Why logs with the statistics: a call's $ is its price times its tokens, and its tokens grow with the question's
length, which the statistics carry (log-scaled): a product, so linear in logs. On MMLU-Pro (2,000 training / 2,000
held-out questions, 5 splits) the log form with statistics brought the estimator's $ curve level with the
per-subject router's (APGR 0.810 vs 0.813, from 0.763) and nearly halved that router's largest lead over it (+1.18
to +0.64 points); the statistics in a linear ridge, or logs without them, did not (docs/quality.md, "The estimator
in logs"). Without statistics the linear form stays: its figures are published.

The ridge strength is chosen per run by k-fold cross-validation on the training tasks (`choose_alpha`: squared
error, in the form's own scale, relative to each plan's mean square), folds by task as the P(correct) selection's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from orchestra.routing.select import folds_of, standardise

KEYS = ("cost", "lat")  # coefficient prefixes: $ and seconds
# strongest first (ties, e.g. a constant target, keep the plan's mean)
GRID_ALPHA = (1e4, 100.0, 10.0, 1.0, 0.1)
EPS_SHARE = 0.01  # ε of the log form, as a share of the plan's mean (a plan that never spends keeps predicting 0)
LOG_ARRAYS = ("ridge_mu", "ridge_sd", "cost_eps", "cost_smear", "lat_eps", "lat_smear")  # what the log form adds


def form(coef: dict[str, np.ndarray]) -> str:
    """"log" or "linear": which form fitted coefficients are in (saved as the estimator model's `spend`)."""
    return "log" if "ridge_mu" in coef else "linear"


def choose_alpha(X: np.ndarray, rows: Sequence[np.ndarray], targets: Sequence[np.ndarray], folds: int = 5,
                 seed: int = 0, grid: Sequence[float] = GRID_ALPHA) -> tuple[float, dict[str, float]]:
    """(the ridge strength with the lowest cross-validated squared error, summed over plans each relative to its
    target's mean square, {alpha: that error}); folds by task as in select.cross_validate."""
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


def ridge_features(X: np.ndarray, S: np.ndarray | None, coef: dict[str, np.ndarray]) -> np.ndarray:
    """What the ridges read: X (embedding + meta), then in the log form the standardised statistics."""
    if "ridge_mu" not in coef:
        return X
    if S is None:
        raise ValueError("this router's $ model reads text statistics, but the features carry none")
    return np.hstack([X, (S - coef["ridge_mu"]) / coef["ridge_sd"]])


def fit(X: np.ndarray, S: np.ndarray | None, rows: Sequence[np.ndarray], targets: dict[str, Sequence[np.ndarray]],
        alpha: float, select: bool, folds: int, seed: int
        ) -> tuple[dict[str, np.ndarray], dict[str, float], dict[str, dict[str, object]]]:
    """(coefficients: per key `<key>_w` [plans, columns], `_b`, `_min`, and in the log form `_eps`, `_smear` and
    `ridge_mu` / `ridge_sd`; the ridge strength per key; the selection's entries per key, {} without `select`).
    rows[j]: the task row of each of plan j's samples; targets[key][j]: their $ or seconds."""
    from sklearn.linear_model import Ridge

    log = S is not None and S.shape[1] > 0
    coef: dict[str, np.ndarray] = {}
    if log:
        coef["ridge_mu"], coef["ridge_sd"] = standardise(S)
    R = ridge_features(X, S, coef)
    strengths, selection = {}, {}
    for key in KEYS:
        ys = [np.asarray(y, dtype=np.float64) for y in targets[key]]
        eps = np.array([EPS_SHARE * max(float(y.mean()), 0.0) + 1e-12 for y in ys])
        fitted = [np.log(np.maximum(y, 0.0) + e) for y, e in zip(ys, eps, strict=True)] if log else ys
        strengths[key] = alpha
        if select:
            strengths[key], errors = choose_alpha(R, rows, fitted, folds, seed)
            selection[f"alpha_{key}"] = {"chosen": strengths[key], "relative_squared_error": errors,
                                         **({"scale": "log"} if log else {})}
        w, b = np.zeros((len(ys), R.shape[1])), np.zeros(len(ys))
        smear = np.ones(len(ys))
        for j, (r, y) in enumerate(zip(rows, fitted, strict=True)):
            m = Ridge(alpha=strengths[key]).fit(R[r], y)
            w[j], b[j] = m.coef_, m.intercept_
            if log:  # Duan's smearing: E[exp(residual)] turns the fitted log-mean back into a mean
                smear[j] = float(np.mean(np.exp(y - m.predict(R[r]))))
        coef.update({f"{key}_w": w, f"{key}_b": b, f"{key}_min": np.array([float(y.min()) for y in ys])})
        if log:
            coef.update({f"{key}_eps": eps, f"{key}_smear": smear})
    return coef, strengths, selection


def predict(coef: dict[str, np.ndarray], key: str, X: np.ndarray, S: np.ndarray | None) -> np.ndarray:
    """[rows, plans] predicted $ (key "cost") or seconds ("lat"), floored at each plan's least training value
    (files from before the floor: 0)."""
    lin = ridge_features(X, S, coef) @ coef[f"{key}_w"].T + coef[f"{key}_b"]
    if f"{key}_smear" in coef:
        lin = np.exp(np.minimum(lin, 700.0)) * coef[f"{key}_smear"] - coef[f"{key}_eps"]
    return np.maximum(lin, coef.get(f"{key}_min", 0.0))
