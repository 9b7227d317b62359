"""Fusion of several rankings of one query into one: score-normalised (`zscore_fuse`, the default) or by
reciprocal rank (`rrf_fuse`). Both are pure functions over `Hit` lists; which rankings to fuse, how deep each is
read and with what weights is tools/retrieval/hybrid.py's business, fitting the weights tools/retrieval/fit.py's.

Why z-scores by default: RRF with equal weights lands between its members, so when one member is much weaker on a
corpus it loses to the stronger one (measured on a multi-hop corpus: dense 0.682, BM25 0.586, RRF 0.670 recall@10).
Standardising each ranking's scores over its own top hits lets a member that separates its top hits from the rest
(a confident query) outweigh one whose scores are flat, per query, with no labels. Measured on 12 retrieval tasks
built from the HotpotQA data (passages and sentences; the whole corpus, or each question among its own pool of
distractors; both members, or one weakened by stripping the titles from what it indexes), equal-weight z-score
fusion over each member's top 20 was never below the better member (+0.000 to +0.058 recall@10, mean +0.024),
where RRF fell up to 0.012 below it; min-max scaling did about as well, z-scores over the top 10 or 30-100 within
0.005 of the better member. bench/retrieval.py prints both fusions on the whole-corpus tasks.
"""

from __future__ import annotations

from tools.retrieval.corpus import Hit

FUSIONS = ("zscore", "rrf")


def zscore_fuse(rankings: list[list[Hit]], weights: list[float], k: int) -> list[Hit]:
    """The top k of several rankings of one query by weighted z-score fusion (CombSUM of standardised scores).

    Each ranking's scores are standardised over the hits it holds (the caller reads each to the same depth); a
    passage absent from a ranking gets that ranking's lowest standardised score (it ranked no better than the last
    hit shown). A ranking whose hits all score alike (one hit: BM25 drops passages sharing no query word) says only
    that its hits beat the rest, so its hits get 0 and the rest -1. A hit's score becomes its fused score; ties go
    to the passage seen first, so the result is deterministic."""
    first: dict[str, Hit] = {}
    for ranking in rankings:
        for hit in ranking:
            first.setdefault(hit.doc_id, hit)
    fused = dict.fromkeys(first, 0.0)
    for ranking, weight in zip(rankings, weights, strict=True):
        if not ranking or not weight:
            continue
        scores = [h.score for h in ranking]
        mean = sum(scores) / len(scores)
        sd = (sum((s - mean) ** 2 for s in scores) / len(scores)) ** 0.5
        z = {h.doc_id: (h.score - mean) / sd if sd > 0 else 0.0 for h in ranking}
        floor = min(z.values()) if sd > 0 else -1.0
        for doc_id in fused:
            fused[doc_id] += weight * z.get(doc_id, floor)
    order = sorted(fused, key=lambda d: -fused[d])  # stable: ties keep first-seen order
    return [Hit(d, first[d].title, first[d].text, fused[d]) for d in order[:k]]


def rrf_fuse(rankings: list[list[Hit]], weights: list[float], k: int, rrf_k: int = 60) -> list[Hit]:
    """The top k of several rankings of one query by weighted reciprocal-rank fusion (Cormack et al. 2009: a
    passage scores sum_i w_i / (rrf_k + rank_i), rank from 1); a hit's score becomes its fused score. Ties go to
    the passage seen first (rankings in order), so the result is deterministic."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + weight / (rrf_k + rank)
            first.setdefault(hit.doc_id, hit)
    order = sorted(fused, key=lambda d: -fused[d])  # stable: ties keep first-seen order
    return [Hit(d, first[d].title, first[d].text, fused[d]) for d in order[:k]]
