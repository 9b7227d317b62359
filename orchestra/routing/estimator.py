"""The estimator router: per route, predict P(correct), $ and seconds from what a request shows; pick the route
with the highest expected reward under the request's own preference.

What it learns from: `Outcome` rows, every plan (orchestra/routing/plans.py) played on each training task
(exploration episodes on any zoo; recorded outcomes on replay zoos). Per plan:
  P(correct | x)   chosen per run by k-fold cross-validation on the training tasks (orchestra/routing/select.py):
                   L2-regularised logistic regression (scikit-learn) over a grid of `C`, with or without the meta
                   one-hots, the smoothed mean outcome of the k nearest training tasks (kNN, cosine), the
                   smoothed mean of the task's family (when meta one-hots are given), a logistic fit on the text's
                   surface statistics (`text`, when the features end with them), or the mean of the best of two or
                   more kinds, by the lowest log-loss (`select_by="routing"`: by the best routing of the
                   held-out folds, select.routing_value); `select=False` (or too few tasks) fits the logistic
                   regression at the given `C`;
  $, seconds       ridge regressions (orchestra/routing/spend.py; strength chosen by the same cross-validation),
                   floored at each plan's least training value; with text statistics fitted in logs and reading
                   them too (a call's $ is its price times its tokens, which grow with the question's length);
where x = TaskFeatures: the sentence embedding of the problem text (the all-MiniLM-L6-v2 weights the project
ships, tools/retriever.Embedder), plus one-hot `task.meta` fields named in `meta_keys` (e.g. family,
difficulty) when the data carries them (`n_meta` columns: `fit(..., n_meta=features.n_meta)` lets the selection
try without them), plus with `router.text_stats` the text's length, numbers and symbols (orchestra/routing/
text_stats.py; the last `n_stats` columns, read by the `text` kind and the $ / seconds ridges; the other kinds never
see them). A plan whose training outcome never varies gets a constant, smoothed estimate
((k + 1) / (n + 2)). The choice and every candidate's cross-validated score are saved with the router.

The choice is the expectation of the `scalar` rubric (reward/rubric.py), so it follows any preference vector
by construction, tool likes and dislikes included:
  EV(plan) = P_acc·p̂ − P_cost·$̂/cost_scale − P_lat·ŝ/latency_scale + Σ_t P_tool:t · (calls of tier t).
Saved as plain arrays (npz) plus JSON, never pickle: loading a router runs no code from the file. A router with a
kNN or family part keeps its training rows and per-task outcome sums (`knn_*` arrays); files written before the
selection existed (no `model` entry) load as the logistic regressions they are, and blends written before the
family kind (no `parts`) as the logistic + kNN mean they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.routing import select as model_select
from orchestra.routing import spend
from orchestra.routing.plans import Outcome, Plan
from orchestra.routing.text_stats import NAMES as STAT_NAMES
from orchestra.routing.text_stats import text_stats
from orchestra.types import Preference, Task
from orchestra.value import expected_value

Embed = Callable[[list[str]], np.ndarray]


class TaskFeatures:
    """Task -> feature row: the problem's sentence embedding, then one-hots of the configured meta fields over
    the values seen when fitting (an unseen value is all zeros), then with `text_stats` the problem's surface
    statistics (orchestra/routing/text_stats.py; `n_stats` columns at the very end)."""

    def __init__(self, embed: Embed, meta_keys: Sequence[str] = (), vocab: dict[str, list[str]] | None = None,
                 text_stats: bool = False):
        self.embed, self.meta_keys, self.text_stats = embed, list(meta_keys), bool(text_stats)
        self.vocab = {k: list(v) for k, v in (vocab or {}).items()}

    def fit_vocab(self, tasks: Sequence[Task]) -> TaskFeatures:
        self.vocab = {k: sorted({str(t.meta[k]) for t in tasks if k in t.meta}) for k in self.meta_keys}
        return self

    def __call__(self, tasks: Sequence[Task]) -> np.ndarray:
        emb = np.asarray(self.embed([t.problem for t in tasks]), dtype=np.float64)
        cols = [np.array([[str(t.meta.get(k)) == v for v in self.vocab.get(k, [])] for t in tasks], dtype=np.float64)
                .reshape(len(tasks), -1) for k in self.meta_keys]
        if self.text_stats:
            cols.append(text_stats([t.problem for t in tasks]))
        return np.hstack([emb, *cols]) if cols else emb

    @property
    def n_meta(self) -> int:
        """How many one-hot meta columns follow the embedding (the estimator's selection may leave them out)."""
        return sum(len(self.vocab.get(k, [])) for k in self.meta_keys)

    @property
    def n_stats(self) -> int:
        """How many text-statistics columns end each row (0 without `text_stats`)."""
        return len(STAT_NAMES) if self.text_stats else 0


@dataclass
class Expected:
    """Per task (rows) and plan (columns): P(correct), $ and seconds."""

    p_correct: np.ndarray
    cost_usd: np.ndarray
    latency_s: np.ndarray


def expected_reward(exp: Expected, plans: Sequence[Plan], pref: Preference, cost_scale: float,
                    latency_scale: float) -> np.ndarray:
    """[tasks, plans] expected `scalar` reward under one preference vector (orchestra/value.py)."""
    return expected_value(exp.p_correct, exp.cost_usd, exp.latency_s, [p.tool_counts() for p in plans], pref,
                          cost_scale, latency_scale)


def split_stats(X: np.ndarray, n_stats: int) -> tuple[np.ndarray, np.ndarray | None]:
    """(the embedding + meta columns, the last `n_stats` text-statistics columns or None)."""
    if not n_stats:
        return X, None
    return X[:, :X.shape[1] - n_stats], X[:, X.shape[1] - n_stats:]


def parts_of(model: dict[str, Any]) -> list[str]:
    """The kinds a saved P(correct) model averages (blends from before the family kind: logistic + kNN)."""
    kind = model.get("kind", "logistic")
    return list(model.get("parts") or (("logistic", "knn") if kind == "blend" else (kind,)))


class RouteEstimator:
    """Per-plan predictors of correctness, $ and seconds over task features (module docstring)."""

    def __init__(self, plans: Sequence[Plan], C: float = 1.0, alpha: float = 1.0, select: bool = True,
                 folds: int = 5, seed: int = 0, select_by: str = "log_loss"):
        if not plans:
            raise ValueError("the estimator router needs at least one plan")
        self.plans, self.C, self.alpha = list(plans), float(C), float(alpha)
        self.select, self.folds, self.seed = bool(select), int(folds), int(seed)
        if select_by not in model_select.CRITERIA:
            raise ValueError(f"select_by must be one of {model_select.CRITERIA}, got {select_by!r}")
        self.select_by = select_by  # the selection's criterion (orchestra/routing/select.py)
        self.index = {p.name: i for i, p in enumerate(self.plans)}
        # acc_w [P, d], acc_b [P], the $ / seconds ridges' cost_* and lat_* (spend.py), knn_*, text_*
        self.coef: dict[str, np.ndarray] = {}
        self.n_train = 0
        # the P(correct) model: kind logistic | knn | family | blend, parts (the kinds it averages), C / k / s,
        # meta / knn_meta (whether each part used the meta one-hots), n_meta (how many), alpha_cost / alpha_lat
        # (the ridge strengths), spend (the ridges' form: linear | log)
        self.model: dict[str, Any] = {"kind": "logistic", "C": self.C, "meta": True, "n_meta": 0}
        self.selection: dict[str, Any] = {}  # what the cross-validation chose and every candidate's score

    # ------------------------------------------------------------ fitting
    def fit(self, X: np.ndarray, task_ids: Sequence[str], outcomes: Sequence[Outcome], n_meta: int = 0,
            n_stats: int = 0) -> RouteEstimator:
        """X: one feature row per task of `task_ids` (TaskFeatures: the embedding, `n_meta` meta one-hot columns,
        then `n_stats` text-statistics columns); outcomes: plan results on those tasks (every plan on every task;
        several seeds of a task are all used as samples). Only the `text` kind reads the statistics."""
        from threadpoolctl import threadpool_limits

        # hundreds of small solves: BLAS threads only contend (ridge fits measured 45x slower with 2 threads than
        # with 1 on a busy 2-core machine)
        with threadpool_limits(limits=1):
            return self._fit(X, task_ids, outcomes, n_meta, n_stats)

    def _fit(self, X: np.ndarray, task_ids: Sequence[str], outcomes: Sequence[Outcome], n_meta: int, n_stats: int
             ) -> RouteEstimator:
        row = {t: i for i, t in enumerate(task_ids)}
        X, S = split_stats(X, n_stats)
        n, d = X.shape
        by_plan: dict[str, list[Outcome]] = {p.name: [] for p in self.plans}
        for o in outcomes:
            if o.plan in by_plan and o.task_id in row:
                by_plan[o.plan].append(o)
        missing = [name for name, rows in by_plan.items() if not rows]
        if missing:
            raise ValueError(f"no outcomes for plan(s) {missing} on the given tasks: explore every plan first")
        data = model_select.plan_data(n, [[row[o.task_id] for o in by_plan[p.name]] for p in self.plans],
                                [[float(o.correct) for o in by_plan[p.name]] for p in self.plans])
        targets = {"cost": [np.array([o.cost_usd for o in by_plan[p.name]]) for p in self.plans],
                   "lat": [np.array([o.latency_s for o in by_plan[p.name]]) for p in self.plans]}
        chosen = model_select.Candidate("logistic", C=self.C)
        self.selection = {"method": "fixed", "chosen": chosen.name}
        if self.select and n >= model_select.MIN_TASKS:
            cost = np.zeros((n, len(self.plans)))  # each task's mean recorded $ per plan, for the routing score
            for j in range(len(self.plans)):
                np.add.at(cost[:, j], data.rows[j], targets["cost"][j])
            chosen, scores, rule = model_select.cross_validate(X, data, n_meta, folds=self.folds, seed=self.seed,
                                                         criterion=self.select_by,
                                                         cost=cost / np.maximum(data.counts, 1.0), S=S)
            self.selection = {"method": f"{self.folds}-fold cross-validation on the training tasks, "
                                        + self.select_by.replace("_", "-"),
                              "seed": self.seed, "chosen": chosen.name, "scores": scores,
                              **({"rule": rule} if rule else {})}
        elif self.select:
            self.selection["why"] = f"{n} tasks: too few to cross-validate (< {model_select.MIN_TASKS})"
        P = len(self.plans)
        c, alpha, entries = spend.fit(X, S, data.rows, targets, self.alpha, self.selection["method"] != "fixed",
                                      self.folds, self.seed)  # $ and seconds: linear, or in logs with statistics
        self.selection.update(entries)
        c.update(acc_w=np.zeros((P, d)), acc_b=np.zeros(P))
        cols = d if chosen.meta else d - n_meta
        parts = chosen.parts or (chosen.kind,)
        for j in range(P):
            if "logistic" in parts:
                w, c["acc_b"][j], _ = model_select.fit_logistic(X[data.rows[j]][:, :cols], data.y[j], chosen.C)
                c["acc_w"][j, :cols] = w  # left-out meta columns keep weight 0
        if "text" in parts:  # standardised on every training task, as each fold was on its own; a blend's C is
            mu, sd = model_select.standardise(S)  # its logistic part's, so the text part takes its own TEXT_C
            c.update(text_mu=mu, text_sd=sd, text_w=np.zeros((P, n_stats)), text_b=np.zeros(P))
            for j in range(P):
                c["text_w"][j], c["text_b"][j], _ = model_select.fit_logistic((S[data.rows[j]] - mu) / sd, data.y[j],
                                                                              model_select.TEXT_C)
        if {"knn", "family"} & set(parts):
            c.update(knn_X=np.asarray(X, dtype=np.float64), knn_sum=data.sums, knn_count=data.counts,
                     knn_prior=model_select.plan_prior(data.sums, data.counts))
        self.model = {"kind": chosen.kind, "parts": list(parts), "C": chosen.C, "k": chosen.k, "s": chosen.s,
                      "meta": chosen.meta, "knn_meta": chosen.knn_meta, "n_meta": int(n_meta), "n_stats": int(n_stats),
                      "alpha_cost": alpha["cost"], "alpha_lat": alpha["lat"],
                      "spend": spend.form(c)}
        self.coef, self.n_train = c, n
        return self

    # ------------------------------------------------------------ prediction
    def p_correct(self, X: np.ndarray) -> np.ndarray:
        """[rows, plans] P(correct) from the fitted model: the mean of its parts' (logistic, kNN, family, text)."""
        c, m = self.coef, self.model
        X, S = split_stats(X, int(m.get("n_stats", 0)))
        out = []
        for part in parts_of(m):
            if part == "text":
                out.append(1.0 / (1.0 + np.exp(-(((S - c["text_mu"]) / c["text_sd"]) @ c["text_w"].T + c["text_b"]))))
            elif part == "logistic":
                out.append(1.0 / (1.0 + np.exp(-(X @ c["acc_w"].T + c["acc_b"]))))
            elif part == "knn":
                k = int(m["k"])
                out.append(model_select.knn_predict(X, c["knn_X"], c["knn_sum"], c["knn_count"], c["knn_prior"], [k],
                                                    int(m.get("n_meta", 0)), bool(m.get("knn_meta", True)))[k])
            else:
                s = float(m["s"])
                out.append(model_select.family_predict(X, c["knn_X"], c["knn_sum"], c["knn_count"], c["knn_prior"],
                                                       [s], int(m["n_meta"]))[s])
        return out[0] if len(out) == 1 else np.mean(out, axis=0)

    def expected(self, X: np.ndarray) -> Expected:
        if not self.coef:
            raise RuntimeError("RouteEstimator.expected before fit/load")
        c, p = self.coef, self.p_correct(X)
        X, S = split_stats(X, int(self.model.get("n_stats", 0)))
        return Expected(p, spend.predict(c, "cost", X, S), spend.predict(c, "lat", X, S))

    def choose(self, X: np.ndarray, prefs: Sequence[Preference], cost_scale: float, latency_scale: float
               ) -> list[Plan]:
        """The best plan for each row of X under its own preference vector (ties: the earlier plan)."""
        exp = self.expected(X)
        out = []
        for i, pref in enumerate(prefs):
            one = Expected(exp.p_correct[i:i + 1], exp.cost_usd[i:i + 1], exp.latency_s[i:i + 1])
            out.append(self.plans[int(np.argmax(expected_reward(one, self.plans, pref, cost_scale, latency_scale)[0]))])
        return out

    # ------------------------------------------------------------ files
    def save(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """estimator.json (plans, settings, `extra` such as the feature spec) + estimator.npz, written atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        meta = {"plans": [{"name": p.name, "calls": [list(c) for c in p.calls]} for p in self.plans],
                "C": self.C, "alpha": self.alpha, "n_train": self.n_train, "model": self.model,
                "selection": self.selection, **(extra or {})}
        tmp = d / "estimator.npz.tmp"
        with tmp.open("wb") as f:
            np.savez(f, **self.coef)
        tmp.replace(d / "estimator.npz")
        (d / "estimator.json.tmp").write_text(json.dumps(meta, indent=1))
        (d / "estimator.json.tmp").replace(d / "estimator.json")
        return d

    @classmethod
    def load(cls, directory: str | Path) -> tuple[RouteEstimator, dict[str, Any]]:
        """(estimator, the JSON metadata) from a directory `save` wrote."""
        d = Path(directory)
        if not (d / "estimator.json").is_file():
            raise FileNotFoundError(f"{d}: no estimator.json (a `make train` run whose warm start is "
                                    "sft.teacher=expected_value saves one in <run_dir>/router/)")
        meta = json.loads((d / "estimator.json").read_text())
        plans = [Plan(p["name"], tuple((tool, tier) for tool, tier in p["calls"])) for p in meta["plans"]]
        est = cls(plans, C=meta.get("C", 1.0), alpha=meta.get("alpha", 1.0))
        with np.load(d / "estimator.npz", allow_pickle=False) as z:
            est.coef = {k: z[k] for k in z.files}
        est.n_train = int(meta.get("n_train", 0))
        # files from before the selection have no `model`: the logistic regressions at their C, meta included
        est.model = dict(meta.get("model") or {"kind": "logistic", "C": est.C, "meta": True, "n_meta": 0})
        est.selection = dict(meta.get("selection") or {})
        kind = est.model.get("kind")
        if kind not in (*model_select.KINDS, "blend"):
            raise ValueError(f"{d}: unknown P(correct) model {kind!r} (this version has logistic, knn, family, text, "
                             "blend)")
        parts = parts_of(est.model)
        need = (("acc_w", "acc_b") if "logistic" in parts else ()) + (
            ("knn_X", "knn_sum", "knn_count", "knn_prior") if {"knn", "family"} & set(parts) else ()) + (
            ("text_w", "text_b", "text_mu", "text_sd") if "text" in parts else ()) + (
            spend.LOG_ARRAYS if est.model.get("spend") == "log" else ())
        lacking = [k for k in need if k not in est.coef]
        if lacking:
            raise ValueError(f"{d}: estimator.npz lacks {lacking} for its {est.model['kind']} model")
        return est, meta
