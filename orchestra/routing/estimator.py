"""The estimator router: per route, predict P(correct), $ and seconds from what a request shows; pick the route
with the highest expected reward under the request's own preference.

What it learns from: `Outcome` rows, every plan (orchestra/routing/plans.py) played on each training task
(exploration episodes on any zoo; recorded outcomes on replay zoos). Per plan:
  P(correct | x)   L2-regularised logistic regression (scikit-learn), `C` its inverse strength;
  $, seconds       ridge regressions, clipped at 0;
where x = TaskFeatures: the sentence embedding of the problem text (the all-MiniLM-L6-v2 weights the project
ships, tools/retriever.Embedder), plus one-hot `task.meta` fields named in `meta_keys` (e.g. family,
difficulty) when the data carries them. A plan whose training outcome never varies gets a constant, smoothed
estimate ((k + 1) / (n + 2)).

The choice is the expectation of the `scalar` rubric (reward/rubric.py), so it follows any preference vector
by construction, tool likes and dislikes included:
  EV(plan) = P_acc·p̂ − P_cost·$̂/cost_scale − P_lat·ŝ/latency_scale + Σ_t P_tool:t · (calls of tier t).
Saved as plain arrays (npz) plus JSON, never pickle: loading a router runs no code from the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.routing.plans import Outcome, Plan
from orchestra.types import Preference, Task

Embed = Callable[[list[str]], np.ndarray]


class TaskFeatures:
    """Task -> feature row: the problem's sentence embedding, then one-hots of the configured meta fields over
    the values seen when fitting (an unseen value is all zeros)."""

    def __init__(self, embed: Embed, meta_keys: Sequence[str] = (), vocab: dict[str, list[str]] | None = None):
        self.embed, self.meta_keys = embed, list(meta_keys)
        self.vocab = {k: list(v) for k, v in (vocab or {}).items()}

    def fit_vocab(self, tasks: Sequence[Task]) -> TaskFeatures:
        self.vocab = {k: sorted({str(t.meta[k]) for t in tasks if k in t.meta}) for k in self.meta_keys}
        return self

    def __call__(self, tasks: Sequence[Task]) -> np.ndarray:
        emb = np.asarray(self.embed([t.problem for t in tasks]), dtype=np.float64)
        cols = [np.array([[str(t.meta.get(k)) == v for v in self.vocab.get(k, [])] for t in tasks], dtype=np.float64)
                .reshape(len(tasks), -1) for k in self.meta_keys]
        return np.hstack([emb, *cols]) if cols else emb


@dataclass
class Expected:
    """Per task (rows) and plan (columns): P(correct), $ and seconds."""

    p_correct: np.ndarray
    cost_usd: np.ndarray
    latency_s: np.ndarray


def expected_reward(exp: Expected, plans: Sequence[Plan], pref: Preference, cost_scale: float,
                    latency_scale: float) -> np.ndarray:
    """[tasks, plans] expected `scalar` reward under one preference vector: reward/rubric.scalar_reward is linear
    in correctness, so its expectation is the same formula with P(correct) for the 0/1 outcome. Written out on
    arrays here (the core does not import reward/); tests/orchestra/routing/test_estimator.py pins it to
    scalar_reward."""
    ev = (pref.get("accuracy", 0.0) * exp.p_correct - pref.get("cost", 0.0) * exp.cost_usd / cost_scale
          - pref.get("latency", 0.0) * exp.latency_s / latency_scale)
    tool_terms = np.array([sum(w * plan.tool_counts().get(k[5:], 0) for k, w in pref.items() if k.startswith("tool:"))
                           for plan in plans])
    return ev + tool_terms[None, :]


class RouteEstimator:
    """Per-plan predictors of correctness, $ and seconds over task features (module docstring)."""

    def __init__(self, plans: Sequence[Plan], C: float = 1.0, alpha: float = 1.0):
        if not plans:
            raise ValueError("the estimator router needs at least one plan")
        self.plans, self.C, self.alpha = list(plans), float(C), float(alpha)
        self.index = {p.name: i for i, p in enumerate(self.plans)}
        self.coef: dict[str, np.ndarray] = {}  # acc_w [P, d], acc_b [P], cost_w, cost_b, lat_w, lat_b
        self.n_train = 0

    # ------------------------------------------------------------ fitting
    def fit(self, X: np.ndarray, task_ids: Sequence[str], outcomes: Sequence[Outcome]) -> RouteEstimator:
        """X: one feature row per task of `task_ids`; outcomes: plan results on those tasks (every plan on every
        task; several seeds of a task are all used as samples)."""
        from sklearn.linear_model import LogisticRegression, Ridge

        row = {t: i for i, t in enumerate(task_ids)}
        n, d = X.shape
        by_plan: dict[str, list[Outcome]] = {p.name: [] for p in self.plans}
        for o in outcomes:
            if o.plan in by_plan and o.task_id in row:
                by_plan[o.plan].append(o)
        missing = [name for name, rows in by_plan.items() if not rows]
        if missing:
            raise ValueError(f"no outcomes for plan(s) {missing} on the given tasks: explore every plan first")
        P = len(self.plans)
        c = {k: np.zeros((P, d)) for k in ("acc_w", "cost_w", "lat_w")}
        c.update({k: np.zeros(P) for k in ("acc_b", "cost_b", "lat_b")})
        for j, plan in enumerate(self.plans):
            rows = by_plan[plan.name]
            Xp = X[[row[o.task_id] for o in rows]]
            y = np.array([float(o.correct) for o in rows])
            if y.min() == y.max():  # never varies: a smoothed constant
                p = (y.sum() + 1.0) / (len(y) + 2.0)
                c["acc_b"][j] = np.log(p / (1 - p))
            else:
                m = LogisticRegression(C=self.C, max_iter=5000).fit(Xp, y)
                c["acc_w"][j], c["acc_b"][j] = m.coef_[0], m.intercept_[0]
            for key, target in (("cost", [o.cost_usd for o in rows]), ("lat", [o.latency_s for o in rows])):
                r = Ridge(alpha=self.alpha).fit(Xp, np.asarray(target))
                c[f"{key}_w"][j], c[f"{key}_b"][j] = r.coef_, r.intercept_
        self.coef, self.n_train = c, n
        return self

    # ------------------------------------------------------------ prediction
    def expected(self, X: np.ndarray) -> Expected:
        if not self.coef:
            raise RuntimeError("RouteEstimator.expected before fit/load")
        c = self.coef
        logits = X @ c["acc_w"].T + c["acc_b"]
        return Expected(1.0 / (1.0 + np.exp(-logits)), np.clip(X @ c["cost_w"].T + c["cost_b"], 0.0, None),
                        np.clip(X @ c["lat_w"].T + c["lat_b"], 0.0, None))

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
                "C": self.C, "alpha": self.alpha, "n_train": self.n_train, **(extra or {})}
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
        return est, meta
