"""Choosing the estimator router's P(correct) model per run: k-fold cross-validation on the training tasks.

Candidates (every one fitted per plan on the same task features as orchestra/routing/estimator.py):
  logistic  L2-regularised logistic regression, `C` over a small grid, with or without the one-hot meta fields
            (family / subject) when the features carry them;
  knn       the smoothed mean outcome of the `k` nearest training tasks by cosine similarity of the embedding
            (plus one per shared meta value when `knn_meta`; tasks tied with the k-th all count):
            (Σ outcomes + s·prior) / (Σ episodes + s), the prior being the plan's mean over all training tasks
            and s = `KNN_STRENGTH`. LLMRouterBench found kNN routers competitive with learned ones; they need no
            fitting and follow local structure a linear boundary cannot.
  family    (with meta one-hots) the same smoothed mean over the training tasks that share the most meta values
            with the query (its family / subject), s over `GRID_S`: what the per-family fixed router
            (orchestra/routing/family.py) knows, as a probability. The per-plan logistic fits shrink the family
            one-hots with the embedding's C and estimate each plan on its own; on MMLU-Pro the family means routed
            better on the $ axis than the model the log-loss selection chose (held-out APGR 0.63-0.65 vs 0.59, 3
            splits), though not better than a logistic fit with the subject at C = 0.1 (0.68).
  text      (with text-statistics columns) logistic regression at C = `TEXT_C` on the task text's surface
            statistics (orchestra/routing/text_stats.py: length, numbers, symbols), standardised on the training
            fold: how long and how quantitative a question is, which a sentence embedding barely keeps;
  blend     the mean of the probabilities of the best candidate of each kind, every pair, triple and all of them
            (scored on the same out-of-fold predictions). The kNN and family parts estimate every plan on the same
            tasks, so differences between plans are paired, which the routing choice is about; the embedding parts
            add what the family does not say.
The score is the log-loss of P(correct) over every held-out (task, plan) outcome: a proper score, so the choice
also calibrates (a C that gives over-confident probabilities loses). `criterion="routing"` scores what the router
does with the probabilities instead (`routing_value`): on each held-out task the plan of highest P(correct) − w·$
for a sweep of $ weights w, credited with its recorded outcome minus w·its recorded $. Log-loss does not see
routing: on MMLU-Pro a kNN that routed best scored the same log-loss as the logistic model chosen.
The meta one-hots are what the run was configured to read, so a candidate that leaves them out (any part: logistic
`meta`, kNN `knn_meta`) wins only by more than one standard error of its paired per-task difference from the best
candidate that keeps them (the one-standard-error rule, here in favour of the configured features): on MMLU-Pro's
400 training questions the plain minimum left the subject out on 2 of 3 splits by < 0.003 log-loss, and those
choices routed worse on 2000 held-out questions than the best with it (APGR on $ 0.58 vs 0.62 for kNN k=40).
Folds are by task (several seeds of a task stay together) and drawn from a fixed seed, so a run's choice is
deterministic. Too few tasks to cross-validate (< MIN_TASKS) leave the caller's fixed logistic regression in
place. The $ and seconds regressions and their ridge strength: orchestra/routing/spend.py.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchestra.config.training import CRITERIA

# C above 3 never won on RouterArena or MMLU-Pro (400-650 tasks, 384-d embeddings: nearly separable there, so
# lbfgs also runs long): left out
GRID_C = (0.1, 0.3, 1.0, 3.0)
GRID_K = (5, 10, 20, 40, 80)
KNN_STRENGTH = 1.0  # pseudo-episodes of the plan's overall rate mixed into every neighbourhood mean
# the family means' pseudo-episodes: a family of MMLU-Pro's size (~30 of 400 training tasks) keeps most of its own
# rate at 5, half at 20 (all three within 0.003 log-loss of each other there)
GRID_S = (1.0, 5.0, 20.0)
KINDS = ("logistic", "knn", "family", "text")  # a blend's parts come in this order
TEXT_C = 1.0  # nine standardised columns, hundreds of tasks: the penalty barely matters there
MIN_TASKS = 20
EPS = 1e-6  # log-loss clip: one confident miss should cost a lot, not infinity
# the routing criterion's $ weights, per unit of the priciest plan's mean $: 0 (accuracy alone), then quarter
# decades from 0.01 (a nearly free plan ladder) to 10 (the cheapest plan almost always): the range a cost sweep spans
ROUTING_WEIGHTS = (0.0,) + tuple(10.0 ** (e / 4) for e in range(-8, 5))


@dataclass(frozen=True)
class Candidate:
    kind: str  # logistic | knn | family | text | blend (the mean of `parts`' probabilities)
    C: float = 1.0
    k: int = 0
    meta: bool = True  # the logistic part uses the meta one-hots (when the features have any)
    knn_meta: bool = True  # the kNN part counts shared meta values in its similarity
    s: float = 0.0  # the family part's pseudo-episodes of the plan's overall rate
    parts: tuple[str, ...] = ()  # a blend's kinds, in KINDS order

    def part_name(self, kind: str) -> str:
        if kind == "logistic":
            return f"logistic C={self.C:g}{'' if self.meta else ', no meta'}"
        if kind == "knn":
            return f"knn k={self.k}{'' if self.knn_meta else ', no meta'}"
        if kind == "text":
            return "text stats"
        return f"family s={self.s:g}"

    @property
    def name(self) -> str:
        if self.kind == "blend":
            return "blend of " + " + ".join(self.part_name(p) for p in self.parts)
        return self.part_name(self.kind)


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


def family_predict(Xq: np.ndarray, Xt: np.ndarray, sums: np.ndarray, counts: np.ndarray, prior: np.ndarray,
                   strengths: Sequence[float], n_meta: int) -> dict[float, np.ndarray]:
    """s -> [queries, plans] smoothed means over the training tasks sharing the most meta values with each query
    (its family; a query whose family no training task has shares none, so every task counts: the plan prior)."""
    shared = Xq[:, Xq.shape[1] - n_meta:] @ Xt[:, Xt.shape[1] - n_meta:].T
    near = (shared >= shared.max(axis=1, keepdims=True) - 1e-12).astype(np.float64)
    ns, nc = near @ sums, near @ counts
    return {s: (ns + s * prior) / (nc + s) for s in strengths}


def plan_prior(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    tot = counts.sum(axis=0)
    return np.where(tot > 0, (sums.sum(axis=0) + 1.0) / (tot + 2.0), 0.5)


# ---------------------------------------------------------------- cross-validation
def candidates(n_meta: int, n_train: int, grid_c: Sequence[float] = GRID_C, grid_k: Sequence[int] = GRID_K,
               text: bool = False) -> list[Candidate]:
    metas = (True, False) if n_meta else (True,)
    ks = [k for k in grid_k if k < n_train] or [max(1, n_train - 1)]
    return ([Candidate("logistic", C=c, meta=m) for m in metas for c in grid_c]
            + [Candidate("knn", k=k, knn_meta=m) for m in metas for k in ks]
            + [Candidate("family", s=v) for v in (GRID_S if n_meta else ())]
            + ([Candidate("text", C=TEXT_C)] if text else []))


def standardise(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mean, sd) per column of the training rows; a constant column's sd is 1 (its weight stays 0)."""
    mu, sd = S.mean(axis=0), S.std(axis=0)
    return mu, np.where(sd > 1e-9, sd, 1.0)


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
    return float(np.mean(routing_per_task(p_hat, correct, cost, weights)))


def routing_per_task(p_hat: np.ndarray, correct: np.ndarray, cost: np.ndarray,
                     weights: Sequence[float] = ROUTING_WEIGHTS) -> np.ndarray:
    """[tasks] each task's term of `routing_value`: its mean over the weights."""
    scale = max(float(np.max(cost.mean(axis=0))), 1e-300)
    c, rows = cost / scale, np.arange(len(cost))
    values = np.zeros(len(cost))
    for w in weights:
        pick = np.argmax(p_hat - w * c, axis=1)
        values += correct[rows, pick] - w * c[rows, pick]
    return values / len(weights)


def cross_validate(X: np.ndarray, data: PlanData, n_meta: int, folds: int = 5, seed: int = 0,
                   grid_c: Sequence[float] = GRID_C, grid_k: Sequence[int] = GRID_K, criterion: str = "log_loss",
                   cost: np.ndarray | None = None, S: np.ndarray | None = None
                   ) -> tuple[Candidate, dict[str, dict[str, float]], str]:
    """(the chosen candidate, {candidate name: {log_loss, brier[, routing]}}, a note when the one-standard-error
    rule for the meta one-hots changed the choice, else ""): log-loss and Brier per held-out
    outcome, averaged over plans and tasks; `routing` (with `cost`, [tasks, plans] mean recorded $) the
    `routing_value` of the out-of-fold probabilities on the tasks where every plan was played. The grid's
    candidates, then the blends of the best of each kind, scored on the same out-of-fold predictions.
    `criterion`: log_loss (lowest wins) or routing (highest wins, then the lower log-loss). Ties: the
    earlier candidate. A candidate without the meta one-hots must beat the best with them by more than one
    standard error (module docstring). `S`: [tasks, stats] text statistics, for the `text` kind (X holds none)."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    if criterion == "routing" and cost is None:
        raise ValueError("criterion='routing' needs each task's recorded $ per plan (cost)")
    n, d = X.shape[0], X.shape[1] - n_meta
    fold_of = folds_of(n, folds, seed)
    cands = candidates(n_meta, n - n // folds, grid_c, grid_k, text=S is not None and S.shape[1] > 0)
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
        if n_meta:
            fam = family_predict(X[test], X[train], data.sums[train], data.counts[train],
                                 plan_prior(data.sums[train], data.counts[train]), GRID_S, n_meta)
            for j, rows in enumerate(data.rows):
                in_test = fold_of[rows] == f
                for c in (c for c in cands if c.kind == "family"):
                    oof[c][j][in_test] = fam[c.s][test_pos[rows[in_test]], j]
        for c in (c for c in cands if c.kind == "text"):
            mu, sd = standardise(S[train])
            Z = (S - mu) / sd
            for j, (rows, y) in enumerate(zip(data.rows, data.y, strict=True)):
                in_train, in_test = fold_of[rows] != f, fold_of[rows] == f
                if in_test.any():
                    w, b, _ = fit_logistic(Z[rows[in_train]], y[in_train], c.C)
                    oof[c][j][in_test] = 1.0 / (1.0 + np.exp(-(Z[rows[in_test]] @ w + b)))
    full = np.flatnonzero((data.counts > 0).all(axis=1))  # tasks on which every plan was played
    correct = data.sums[full] / data.counts[full]
    if criterion == "routing" and not len(full):
        raise ValueError("criterion='routing' needs tasks on which every plan was played (explore every plan on "
                         "each task, router.explore_tasks)")

    # candidate -> each task's term of the criterion, for the meta rule's paired SE (only with meta one-hots)
    per_task: dict[str, np.ndarray] = {}

    def score(name: str, p: list[np.ndarray]) -> dict[str, float]:
        out = _scores(p, data.y)
        if n_meta and criterion == "log_loss":  # each task's summed loss over its outcomes, in units of the mean's
            per_task[name] = _per_task([_log_loss(pj, yj) for pj, yj in zip(p, data.y, strict=True)], data, n,
                                       mean=False).sum(axis=1) * n / sum(len(y) for y in data.y)
        if cost is not None and len(full):
            values = routing_per_task(_per_task(p, data, n)[full], correct, cost[full])
            out["routing"] = float(np.mean(values))
            if n_meta and criterion == "routing":
                per_task[name] = -values  # lower is better, as log-loss
        return out

    def rank(c: Candidate) -> tuple[float, float]:  # lower is better
        sc = scores[c.name]
        return (-sc["routing"], sc["log_loss"]) if criterion == "routing" else (sc["log_loss"], 0.0)

    scores = {c.name: score(c.name, oof[c]) for c in cands}
    best = {kind: min(group, key=rank) for kind in KINDS if (group := [c for c in cands if c.kind == kind])}
    lg, nn, fm, _ = (best.get(kind, Candidate(kind)) for kind in KINDS)
    for size in range(2, len(best) + 1):
        for parts in itertools.combinations(best, size):
            b = Candidate("blend", C=lg.C, k=nn.k, meta=lg.meta, knn_meta=nn.knn_meta, s=fm.s, parts=parts)
            scores[b.name] = score(b.name, [np.mean(ps, axis=0)
                                            for ps in zip(*(oof[best[p]] for p in parts), strict=True)])
            cands.append(b)
    chosen = min(cands, key=rank)  # min keeps the first of equal scores
    if not n_meta or uses_meta(chosen):
        return chosen, scores, ""
    keeps = min((c for c in cands if uses_meta(c)), key=rank)
    d = per_task[keeps.name] - per_task[chosen.name]  # > 0: the one with the meta one-hots is worse
    se = float(np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    if float(np.mean(d)) > se:
        return chosen, scores, ""
    return keeps, scores, (f"{keeps.name} (keeps the meta one-hots) is within one standard error of {chosen.name}: "
                           f"{float(np.mean(d)):.4f} <= {se:.4f} ({criterion.replace('_', '-')} per task)")


def uses_meta(c: Candidate) -> bool:
    """Does `c` read the meta one-hots: no logistic or kNN part leaves them out, and some part reads them (a `text`
    part reads none, a `family` part nothing else)?"""
    parts = c.parts or (c.kind,)
    return (("logistic" not in parts or c.meta) and ("knn" not in parts or c.knn_meta)
            and bool({"logistic", "knn", "family"} & set(parts)))


def _per_task(p: Sequence[np.ndarray], data: PlanData, n: int, mean: bool = True) -> np.ndarray:
    """[tasks, plans] mean (or sum) of per-sample values (predictions: a task's samples share one, from one fold)."""
    out = np.zeros((n, len(p)))
    for j, (rows, pj) in enumerate(zip(data.rows, p, strict=True)):
        np.add.at(out[:, j], rows, pj)
    return out / np.maximum(data.counts, 1.0) if mean else out


def _log_loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    pp = np.clip(p, EPS, 1 - EPS)
    return -(y * np.log(pp) + (1 - y) * np.log(1 - pp))


def _scores(p: Sequence[np.ndarray], y: Sequence[np.ndarray]) -> dict[str, float]:
    """Mean log-loss and Brier score over every (plan, sample) outcome."""
    pp, yy = np.concatenate(list(p)), np.concatenate(list(y))
    return {"log_loss": float(np.mean(_log_loss(pp, yy))), "brier": float(np.mean((np.clip(pp, EPS, 1 - EPS) - yy) ** 2))}
