"""RouteLLM's yardstick for a router between a strong and a weak model, and its analogue on $ for n models.

Pure numpy; it knows nothing of tasks, tools or episodes (cluster/evaluate.py feeds it recorded outcomes).
Definitions as lm-sys/RouteLLM's evaluation code computes them (commit 0b64fda: routellm/evals/evaluate.py
`generate_results`, routellm/evals/benchmarks.py `MMLU.evaluate`, `GSM8K.evaluate`, `get_optimal_accuracy`,
routellm/routers/routers.py `Router.route`, `RandomRouter`); docs/quality.md reads them in words.
- score: the router's per-question "strong win rate"; higher = prefer strong. A question goes to the strong
  model when score >= threshold (routers.py `Router.route`).
- thresholds: the bin edges of `pd.qcut(scores, 10, retbins=True)`, i.e. the 0, 10, ..., 100 % quantiles of
  the scores, linearly interpolated. Edge i < 10 sends score >= edge to the strong model; the last edge (the
  maximum) score > edge, i.e. nobody: 11 points from 100 % strong calls down to 0 %. Ties are never split:
  every question scoring exactly an edge goes strong, so a tied block moves as one and shares jump.
  pd.qcut raises on repeated edges (many tied scores), which stops RouteLLM's run; its comment says "including
  duplicates", which is what `thresholds` does: every edge kept, a repeated edge gives a repeated point,
  which adds nothing to the area.
- point: (strong share, accuracy), accuracy = mean correctness of the model each question was routed to.
- AUC = trapezoid(accuracy, share) over the points sorted by share (np.trapz in RouteLLM).
- APGR = (AUC − weak·span) / ((strong − weak)·span), span = largest − smallest share, weak / strong = the
  always-weak / always-strong accuracies: the mean over the covered share of PGR = (acc − weak)/(strong − weak).
  nan when strong == weak or span == 0.
- CPT(x) = np.interp(weak + x·(strong − weak), accuracies, shares), points sorted by share: linear
  interpolation on the curve read backwards (accuracy as abscissa). np.interp assumes rising abscissae; on a
  curve that dips, the number is np.interp's all the same (`Curve.monotone` says whether it rose). A target
  beyond the curve's accuracies gives the end share (np.interp clamps). Where the curve is flat at the target
  (small logs: accuracies are multiples of 1/n) np.interp returns the *last* share of the flat run, not the
  smallest; `first_reach` (`cpt20_first` ...) is the smallest share, reported beside it.
- random: RouteLLM averages 10 runs of a router with uniform random scores per share; its expectation is the
  straight line weak → strong (PGR = share, so APGR 0.5 and CPT(x) = x), which `random_line` gives.
- oracle (`get_optimal_accuracy`, MMLU / GSM8K): at share s, (#weak right + min(s·n, #(weak wrong, strong
  right))) / n, s·n not rounded (MT-Bench's rounds down); drawn at shares 0, 0.1, ..., 1 with plot_optimal (off by
  default), no APGR there; `oracle_curve` gives those 11 points, its APGR the same trapezoid's.
Units: RouteLLM uses percent for accuracy and share; here both are fractions, so AUC = RouteLLM's / 100, CPT is a
share of calls in [0, 1], APGR the same number.

Operating points (a router that offers a few settings, not a score): `points_curve` anchors them at always-weak
(0, weak) and always-strong (1, strong) — a straight piece between two points is a random mix of them — then the
same AUC / APGR / CPT. The $ analogue for n models (`usd_curve`): x = (mean $ − always-cheapest's) ÷
(always-strongest's − always-cheapest's), accuracy between always-cheapest's and always-strongest's, the area
over x in [0, 1] only (points outside are plotted, not integrated); for two models with fixed prices it is the
share curve. `usd_oracle` is the hindsight frontier on $: every question at the cheapest model, then the
cheapest correct model bought for the questions it got wrong, cheapest upgrade first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

GAPS = (0.2, 0.5, 0.8)  # CPT(20 %), CPT(50 %), CPT(80 %): RouteLLM's "20% qual" ... columns
N_THRESHOLDS = 10  # RouteLLM's --num-results: deciles of the scores
ORACLE_SHARES = tuple(np.linspace(0.0, 1.0, 11))  # range(0, 101, 10) percent


def trapezoid(y: Sequence[float], x: Sequence[float]) -> float:
    """∫ y dx by the trapezoid rule (np.trapz, renamed np.trapezoid in numpy 2)."""
    y, x = np.asarray(y, float), np.asarray(x, float)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2.0)) if len(x) > 1 else 0.0


def apgr(x: Sequence[float], acc: Sequence[float], weak: float, strong: float) -> float:
    """RouteLLM's APGR over the points as given (sorted by x): the area above always-weak ÷ the area between
    always-weak and always-strong over the same span."""
    x = np.asarray(x, float)
    span = float(x.max() - x.min()) if len(x) else 0.0
    if span <= 0 or strong == weak:
        return float("nan")
    return (trapezoid(acc, x) - weak * span) / ((strong - weak) * span)


def cpt(x: Sequence[float], acc: Sequence[float], weak: float, strong: float, gap: float) -> float:
    """The share (or normalised $) that recovers `gap` of the weak → strong gap: np.interp read backwards."""
    return float(np.interp(weak + gap * (strong - weak), np.asarray(acc, float), np.asarray(x, float)))


def first_reach(x: Sequence[float], acc: Sequence[float], weak: float, strong: float, gap: float) -> float:
    """The smallest x at which the piecewise-linear curve (sorted by x) first recovers `gap` of the gap (nan:
    never). Equal to `cpt` on a strictly rising curve; where the curve is flat at the target, np.interp (RouteLLM)
    returns the last x of the flat run and this the first; where it dips, this is still defined."""
    target = weak + gap * (strong - weak)
    x, acc = np.asarray(x, float), np.asarray(acc, float)
    for i in range(len(x)):
        if acc[i] >= target - 1e-12:
            if i == 0:
                return float(x[0])
            return float(min(x[i], x[i - 1] + (target - acc[i - 1]) * (x[i] - x[i - 1]) / (acc[i] - acc[i - 1])))
    return float("nan")


@dataclass(frozen=True)
class Curve:
    """Points (x ascending: strong share, or normalised $) and the two references they are judged against."""

    x: np.ndarray
    accuracy: np.ndarray
    weak: float  # always-weak (two models) / always-cheapest (n models) accuracy
    strong: float  # always-strong / always-strongest accuracy

    @property
    def auc(self) -> float:
        return trapezoid(self.accuracy, self.x)

    @property
    def apgr(self) -> float:
        return apgr(self.x, self.accuracy, self.weak, self.strong)

    def cpt(self, gap: float) -> float:
        return cpt(self.x, self.accuracy, self.weak, self.strong, gap)

    def cpt_first(self, gap: float) -> float:
        return first_reach(self.x, self.accuracy, self.weak, self.strong, gap)

    @property
    def monotone(self) -> bool:
        """Does accuracy never fall as x rises? (CPT's np.interp is only meaningful then.)"""
        return bool(np.all(np.diff(self.accuracy) >= -1e-12))

    def summary(self) -> dict[str, float]:
        out = {"auc": self.auc, "apgr": self.apgr, "weak": self.weak, "strong": self.strong,
               "monotone": float(self.monotone)}
        out.update({f"cpt{round(100 * g)}": self.cpt(g) for g in GAPS})
        out.update({f"cpt{round(100 * g)}_first": self.cpt_first(g) for g in GAPS})
        return out

    def points(self) -> list[tuple[float, float]]:
        return [(float(a), float(b)) for a, b in zip(self.x, self.accuracy, strict=True)]


def _sorted(x: Sequence[float], acc: Sequence[float], weak: float, strong: float) -> Curve:
    x, acc = np.asarray(x, float), np.asarray(acc, float)
    order = np.argsort(x, kind="stable")  # equal shares keep their given order
    return Curve(x[order], acc[order], float(weak), float(strong))


def _binary(name: str, values: Sequence[float], n: int | None = None) -> np.ndarray:
    v = np.asarray(values, float)
    if v.ndim != 1 or (n is not None and len(v) != n) or len(v) == 0:
        raise ValueError(f"{name}: expected {n or 'a non-empty list of'} per-question values, got shape {v.shape}")
    return v


def thresholds(scores: Sequence[float], n: int = N_THRESHOLDS) -> np.ndarray:
    """The n + 1 quantile edges RouteLLM routes at (repeated edges kept: the module docstring)."""
    return np.quantile(np.asarray(scores, float), np.linspace(0.0, 1.0, n + 1))


def score_curve(strong_correct: Sequence[float], weak_correct: Sequence[float], scores: Sequence[float],
                n: int = N_THRESHOLDS) -> Curve:
    """RouteLLM's curve of a scoring router: per question correctness (1/0, or a judge's score) of the strong and
    the weak model and the router's score (higher = prefer strong)."""
    s = _binary("strong_correct", strong_correct)
    w = _binary("weak_correct", weak_correct, len(s))
    sc = _binary("scores", scores, len(s))
    edges = thresholds(sc, n)
    shares, accs = [], []
    for i, t in enumerate(edges):
        strong = sc >= t if i != len(edges) - 1 else sc > t  # the last edge: nobody goes strong
        shares.append(float(strong.mean()))
        accs.append(float(np.where(strong, s, w).mean()))
    return _sorted(shares, accs, float(w.mean()), float(s.mean()))


def points_curve(points: Sequence[tuple[float, float]], weak: float, strong: float, anchor: bool = True) -> Curve:
    """A router's operating points (strong share, accuracy); anchored (the default) at always-weak (0, weak) and
    always-strong (1, strong) and cut to shares in [0, 1]; `anchor=False`: RouteLLM's formulas on the points as
    given (APGR over the share they cover; nan with one distinct share)."""
    pts = [(float(x), float(a)) for x, a in points]
    if not anchor and not pts:
        raise ValueError("points_curve: no operating points")
    if anchor:  # a point outside [0, 1] only shows on a plot: the anchors fix the curve's ends
        pts = [(0.0, float(weak)), *((x, a) for x, a in pts if 0.0 <= x <= 1.0), (1.0, float(strong))]
    return _sorted([x for x, _ in pts], [a for _, a in pts], weak, strong)


def random_line(weak: float, strong: float) -> Curve:
    """The expectation of RouteLLM's random router: a straight line from always-weak to always-strong."""
    return Curve(np.array([0.0, 1.0]), np.array([float(weak), float(strong)]), float(weak), float(strong))


def oracle_curve(strong_correct: Sequence[float], weak_correct: Sequence[float],
                 shares: Sequence[float] = ORACLE_SHARES) -> Curve:
    """RouteLLM's optimal router (`get_optimal_accuracy`, MMLU / GSM8K) at `shares`: the strong calls go, in
    hindsight, to questions the weak model got wrong and the strong one right."""
    s = _binary("strong_correct", strong_correct)
    w = _binary("weak_correct", weak_correct, len(s))
    n = len(s)
    gain = float(np.sum((w < 0.5) & (s >= 0.5)))  # RouteLLM: weak == False and strong == True
    weak_right = float(np.sum(w >= 0.5))
    accs = [(weak_right + min(x * n, gain)) / n for x in shares]
    return _sorted(list(shares), accs, float(w.mean()), float(s.mean()))


# ---------------------------------------------------------------- n models: accuracy vs $
def normalise_usd(usd: float, cheapest_usd: float, strongest_usd: float) -> float:
    """Where `usd` lies from always-cheapest's mean $ (0) to always-strongest's (1)."""
    if strongest_usd <= cheapest_usd:
        raise ValueError(f"always-strongest's $ ({strongest_usd}) must exceed always-cheapest's ({cheapest_usd})")
    return (float(usd) - cheapest_usd) / (strongest_usd - cheapest_usd)


def usd_curve(points: Sequence[tuple[float, float]], cheapest: tuple[float, float],
              strongest: tuple[float, float]) -> Curve:
    """Operating points (mean $ per question, accuracy) on the normalised $ axis, anchored at always-cheapest
    and always-strongest (each a (mean $, accuracy) pair); APGR is then the area between the two, normalised."""
    c_usd, c_acc = cheapest
    s_usd, s_acc = strongest
    pts = [(normalise_usd(u, c_usd, s_usd), float(a)) for u, a in points]
    return points_curve(pts, c_acc, s_acc)


def usd_oracle(correct: np.ndarray, cost: np.ndarray, cheapest: int, strongest: int) -> Curve:
    """The hindsight frontier on $, normalised like `usd_curve`: correct / cost are [questions, models]; start with
    every question at model `cheapest`, then, cheapest first, upgrade each question it got wrong to the cheapest
    model that got it right. For two models at fixed prices this is `oracle_curve`'s line."""
    ok = np.asarray(correct, float) >= 0.5
    usd = np.asarray(cost, float)
    n = ok.shape[0]
    c_usd, s_usd = usd[:, cheapest].mean(), usd[:, strongest].mean()
    deltas = []
    for q in range(n):
        if ok[q, cheapest] or not ok[q].any():
            continue
        right = np.flatnonzero(ok[q])
        # an upgrade that also saves $ counts as free: the curve starts at always-cheapest's $
        deltas.append(max(0.0, float(usd[q, right].min() - usd[q, cheapest])))
    xs = [0.0, *(normalise_usd(c_usd + d, c_usd, s_usd) for d in np.cumsum(sorted(deltas)) / n)]
    pts = [(x, float(ok[:, cheapest].mean() + k / n)) for k, x in enumerate(xs)]
    pts.append((max(1.0, xs[-1]), pts[-1][1]))  # past its last upgrade the oracle gains nothing from more $
    inside = [p for p in pts if p[0] < 1.0]
    (x0, a0), (x1, a1) = pts[len(inside) - 1], pts[len(inside)]  # the piece that reaches x = 1: cut it there
    inside.append((1.0, a0 + (a1 - a0) * (1.0 - x0) / (x1 - x0)))
    return Curve(np.array([p[0] for p in inside]), np.array([p[1] for p in inside]), float(ok[:, cheapest].mean()),
                 float(ok[:, strongest].mean()))


# ---------------------------------------------------------------- a routing log's evaluation, from plain arrays
def episode_points(episodes: Sequence[tuple[str, int, dict[int, int], bool]], cost: np.ndarray,
                   strong: int | None = None) -> dict[str, tuple[float, float]]:
    """One operating point per label from (label, question row, {model column: calls}, correct) episodes: (share
    of episodes that called column `strong`, accuracy) when `strong` is given, else (mean recorded $ of the calls
    made, accuracy). An episode that called nobody counts as wrong and free (it answered nothing)."""
    usd = np.asarray(cost, float)
    by: dict[str, list[tuple[float, float]]] = {}
    for label, row, calls, correct in episodes:
        x = float(calls.get(strong, 0) > 0) if strong is not None else sum(usd[row, m] * k for m, k in calls.items())
        by.setdefault(label, []).append((float(x), float(correct)))
    return {k: (float(np.mean([x for x, _ in v])), float(np.mean([a for _, a in v]))) for k, v in by.items()}


def ends(correct: np.ndarray, cost: np.ndarray) -> tuple[int, int]:
    """(strongest, cheapest) columns: the priciest and the least pricey by mean $ (the project's always-strongest
    and always-cheapest); when every model costs the same, the most and the least accurate."""
    ok, usd = np.asarray(correct, float), np.asarray(cost, float)
    if ok.ndim != 2 or ok.shape[1] < 2 or ok.shape != usd.shape or not len(ok):
        raise ValueError(f"correct and cost: [questions, models >= 2] each, got {ok.shape} and {usd.shape}")
    strong, cheap = int(np.argmax(usd.mean(axis=0))), int(np.argmin(usd.mean(axis=0)))
    if strong == cheap:
        strong, cheap = int(np.argmax(ok.mean(axis=0))), int(np.argmin(ok.mean(axis=0)))
    return strong, cheap


def log_yardstick(correct: np.ndarray, cost: np.ndarray, *, scores: dict[str, Sequence[float]] | None = None,
                  sweeps: dict[str, Sequence[tuple[float, float]]] | None = None,
                  policies: dict[str, dict[str, tuple[float, float]]] | None = None) -> dict:
    """Every curve and figure for one evaluated set of questions. correct / cost: [questions, models];
    strongest and cheapest as `ends` picks them. Two models: `scores` (router -> per-question score) give RouteLLM curves and `policies`
    (name -> {label: (strong share, accuracy)}) anchored operating-point curves, beside the random and oracle
    lines. More models: `sweeps` and `policies` are (mean $, accuracy) points, judged on the $ axis.
    Returns {"axis": "share" | "usd", "strong", "cheapest" (columns), "curves": {name: Curve},
    "figures": {"yardstick_[usd_]<figure>_<name>": value}}."""
    ok, usd = np.asarray(correct, float), np.asarray(cost, float)
    mean_usd = usd.mean(axis=0)
    strong, cheap = ends(ok, usd)
    curves: dict[str, Curve] = {}
    if ok.shape[1] == 2:
        axis, s, w = "share", ok[:, strong], ok[:, cheap]
        for name, sc in (scores or {}).items():
            curves[name] = score_curve(s, w, sc)
        for name, pts in (policies or {}).items():
            curves[name] = points_curve(list(pts.values()), float(w.mean()), float(s.mean()))
        curves["oracle"] = oracle_curve(s, w)
        curves["random"] = random_line(float(w.mean()), float(s.mean()))
    else:
        axis = "usd"
        anchors = (float(mean_usd[cheap]), float(ok[:, cheap].mean())), (float(mean_usd[strong]),
                                                                      float(ok[:, strong].mean()))
        for name, pts in {**(sweeps or {}), **{k: list(v.values()) for k, v in (policies or {}).items()}}.items():
            curves[name] = usd_curve(pts, *anchors)
        curves["oracle"] = usd_oracle(ok, usd, cheap, strong)
        curves["random"] = random_line(anchors[0][1], anchors[1][1])
    prefix = "yardstick_" if axis == "share" else "yardstick_usd_"
    figures = {}
    for name, c in curves.items():
        if name == "random":
            continue  # APGR 0.5 and CPT(x) = x by construction
        keys = ("apgr", "cpt20", "cpt50", "cpt80") if name != "oracle" else ("apgr",)
        summary = c.summary()
        figures.update({f"{prefix}{k}_{name}": summary[k] for k in keys})
    return {"axis": axis, "strong": strong, "cheapest": cheap, "curves": curves, "figures": figures}
