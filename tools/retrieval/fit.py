"""Fitting a hybrid index's fusion weight on the user's own questions, cross-validated, with the equal-weight rule
as the fallback.

The candidates are the dense weights 0.0, 0.1, ..., 1.0 (0 and 1 are BM25 and dense alone, so a corpus where one
member is useless can say so). Picking the best weight on the same questions overstates it, so the choice is
scored out of sample: the questions are split into `folds` slices (a fixed shuffle), the weight is picked on the
other slices and scored on the held-out one. The fitted weight (picked on all questions) is adopted only when that
cross-validated recall beats the equal-weight rule's recall on the same questions (which fits nothing, so is out of
sample already); otherwise the rule stays. Below `MIN_QUESTIONS` questions nothing is fitted. Ties go to the weight
nearest the rule's 0.5. `nested_recall` scores this whole procedure out of sample (it runs inside each slice's
complement), which is what bench/retrieval.py reports as the default's recall. The fit is kept in the index's
info.json (tools/retrieval/hybrid.py) and applies to both rounds of `hybrid_2hop`; questions are
tools/retrieval/questions.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from tools.retrieval.hybrid import HybridIndex
from tools.retrieval.questions import Question

WEIGHTS = tuple(i / 10 for i in range(11))
RULE_WEIGHT = 0.5  # the fallback: equal weights, the rule that fits nothing
MIN_QUESTIONS = 10
FOLDS = 5


@dataclass
class Fit:
    dense_weight: float  # what the index now uses
    adopted: bool  # False: the rule's weight was kept
    questions: int
    k: int
    folds: int
    fitted_weight: float  # the best weight on all questions
    recall_rule: float  # recall@k of the rule on these questions (out of sample: nothing fitted)
    recall_fitted_cv: float  # recall@k of picking the weight on the other folds, scored on the held-out fold
    recall_fitted_in_sample: float  # of `fitted_weight` on all questions (optimistic)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.questions < max(MIN_QUESTIONS, self.folds):
            return (f"{self.questions} questions: too few to fit (at least {max(MIN_QUESTIONS, self.folds)}); kept "
                    f"the equal-weight rule, recall@{self.k} {self.recall_rule:.3f}")
        verdict = (f"adopted dense weight {self.dense_weight:.1f}" if self.adopted
                   else f"kept the equal-weight rule ({RULE_WEIGHT})")
        return (f"fit on {self.questions} questions, {self.folds}-fold: recall@{self.k} rule {self.recall_rule:.3f}, "
                f"fitted {self.recall_fitted_cv:.3f} cross-validated (weight {self.fitted_weight:.1f}, "
                f"{self.recall_fitted_in_sample:.3f} in-sample): {verdict}")


def weight_recalls(index: HybridIndex, questions: Sequence[Question], k: int = 10) -> list[list[float]]:
    """recall@k per weight of WEIGHTS (rows) and question (columns) of the index's fusion, first round only: both
    members are searched once and fused at every weight."""
    queries = [q.text for q in questions]
    depth = max(k, index.depth)
    dense_rows, bm25_rows = index.dense.search(queries, depth), index.bm25.search(queries, depth)
    return [[q.recall(row, k) for q, row in zip(questions, index.fuse(dense_rows, bm25_rows, k, w), strict=True)]
            for w in WEIGHTS]


def _mean(row: Sequence[float], idx: Sequence[int]) -> float:
    return sum(row[i] for i in idx) / len(idx)


def _pick(recalls: Sequence[Sequence[float]], idx: Sequence[int]) -> int:
    """The weight (position in WEIGHTS) best on questions `idx`; ties to the one nearest the rule."""
    return max(range(len(WEIGHTS)), key=lambda j: (_mean(recalls[j], idx), -abs(WEIGHTS[j] - RULE_WEIGHT)))


def _slices(idx: Sequence[int], folds: int, seed: int = 0) -> list[list[int]]:
    order = list(idx)
    random.Random(seed).shuffle(order)  # fixed seed: the same file always gives the same fit
    return [order[f::folds] for f in range(folds)]


def _cv_picked(recalls: Sequence[Sequence[float]], idx: Sequence[int], folds: int) -> float:
    """Mean recall on `idx` of picking the weight on the other slices, each slice held out once."""
    total = 0.0
    for held in _slices(idx, folds):
        out = set(held)
        rest = [i for i in idx if i not in out]
        total += sum(recalls[_pick(recalls, rest)][i] for i in held)
    return total / len(idx)


def choose(recalls: Sequence[Sequence[float]], idx: Sequence[int], folds: int = FOLDS) -> tuple[int, bool, float]:
    """(weight position, adopted, cross-validated recall) of the fitting procedure on questions `idx`."""
    rule = WEIGHTS.index(RULE_WEIGHT)
    if len(idx) < max(MIN_QUESTIONS, folds):
        return rule, False, _mean(recalls[rule], idx)
    cv = _cv_picked(recalls, idx, folds)
    best = _pick(recalls, idx)
    adopted = cv > _mean(recalls[rule], idx) and best != rule
    return (best if adopted else rule), adopted, cv


def nested_recall(recalls: Sequence[Sequence[float]], folds: int = FOLDS) -> list[float]:
    """Per-question recall of the whole procedure (fit or keep the rule) run on the other slices and applied to
    each held-out one: the default's out-of-sample recall when the user's questions are given."""
    n = len(recalls[0])
    out = [0.0] * n
    for held in _slices(range(n), folds):
        out_set = set(held)
        rest = [i for i in range(n) if i not in out_set]
        j, _, _ = choose(recalls, rest, folds)
        for i in held:
            out[i] = recalls[j][i]
    return out


def fit(index: HybridIndex, questions: Sequence[Question], k: int = 10, folds: int = FOLDS) -> Fit:
    """Fit `index`'s dense weight on `questions` (or keep the rule) and record the fit on the index."""
    if folds < 2:
        raise ValueError(f"folds must be >= 2, got {folds}")
    recalls = weight_recalls(index, questions, k)
    idx = list(range(len(questions)))
    j, adopted, cv = choose(recalls, idx, folds)
    best = _pick(recalls, idx)
    result = Fit(dense_weight=WEIGHTS[j], adopted=adopted, questions=len(questions), k=k, folds=folds,
                 fitted_weight=WEIGHTS[best], recall_rule=_mean(recalls[WEIGHTS.index(RULE_WEIGHT)], idx),
                 recall_fitted_cv=cv, recall_fitted_in_sample=_mean(recalls[best], idx))
    index.dense_weight, index.fit = result.dense_weight, result.to_dict()
    return result
