"""Retrieval benchmark: dense (all-MiniLM-L6-v2 + FAISS), BM25 and hybrid (the two fused, the default backend)
recall@10 and queries/s on two corpora from shared data, and FAISS search-only queries/s on 100k x 384 random
normalised float32 vectors for the ANN index (HNSW) and the flat one. Prints RESULT lines (names in DESIGN.md
"Benchmarks"); leaves timing judgement to the reader.

Corpora (shared data holds one retrieval set with passages; FRAMES and NQ-open have questions only):
* HotpotQA passages: 100 questions, 994 paragraphs; gold = the supporting-fact titles.
* HotpotQA sentences: the same paragraphs split into 4,137 sentences ("title. sentence"), gold = the 229
  supporting-fact sentences — finer units, 4x the candidates, a different retrieval task on the same questions.
* `--weakened` adds four variants in which one member (BM25 or dense) sees the passages without their titles: a
  weaker member, as on a corpus where one of the two suits the questions less (re-embeds both corpora).
Methods: `hybrid` is the index without the user's questions (z-score fusion over each member's top 20, equal
weights; tools/retrieval/fusion.py); `hybrid_rrf` the previous default (RRF, k = 60, equal weights); `default` is
what `python -m tools.retrieval build --questions` makes of these questions (the weight fitted, cross-validated,
or the rule kept: tools/retrieval/fit.py), scored out of sample by nested cross-validation (the whole procedure
runs on four fifths of the questions and is scored on the fifth). Nothing else is tuned on these questions.
`hybrid_2hop` is the hybrid index with `feedback=1` (a second round: query + the first round's top passage; see
tools/retrieval/hybrid.py). It is not the default, and its RRF form is the variant kept of four tried on these same
questions (top-1 or top-2 passages, with or without extra weight on the first round), so its figures are
in-sample. INFO lines give each fused method's margin over the best single method with a paired bootstrap 95%
interval, and RESULT recall10_margin_2hop_cv(_sentences) is the out-of-sample margin of the 2-hop choice (50
random halvings: the RRF variant best on one half, scored on the other).

The 100k figure (`--no-faiss` skips it): 1000 queries (each a corpus vector plus N(0, 0.01) noise per dimension) in
batches of 256; encoding is excluded. `faiss_ann_recall_ratio_100k` = HNSW recall@10 / flat recall@10 of each
query's planted source vector; `faiss_ann_knn_recall_100k` = the share of flat's exact top 10 that HNSW returns
(low on random data, where neighbours 2-10 are near-ties at cosine ~0.2: a worst case, not what embeddings look
like).
Usage: python bench/retrieval.py [--shared-data DIR] [--queries 1000] [--weakened] [--no-faiss]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tools.retrieval.bm25 import BM25Index  # noqa: E402
from tools.retrieval.corpus import load_passages  # noqa: E402
from tools.retrieval.dense import DenseIndex, Embedder  # noqa: E402
from tools.retrieval.fit import nested_recall, weight_recalls  # noqa: E402
from tools.retrieval.fusion import rrf_fuse  # noqa: E402
from tools.retrieval.hybrid import HybridIndex  # noqa: E402
from tools.retrieval.indexes import new_index  # noqa: E402
from tools.retrieval.indexes import search as faiss_search  # noqa: E402
from tools.retrieval.questions import Question  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def recalls(rows, questions: list[Question], k: int = 10) -> list[float]:
    """Per-question recall@k: the share of a question's gold among its hits (what `eval` reports)."""
    return [q.recall(row, k) for row, q in zip(rows, questions, strict=True)]


def margin_interval(fused: list[float], singles: list[list[float]], n: int = 2000) -> tuple[float, float]:
    """Paired bootstrap 95% interval of mean(fused) - max(mean of each single method): questions are resampled
    together, so the interval shows how much of a margin 100 questions can tell apart from noise."""
    import numpy as np

    rng = np.random.default_rng(0)
    f, s = np.asarray(fused), np.asarray(singles)
    picks = rng.integers(0, len(f), size=(n, len(f)))
    margins = f[picks].mean(axis=1) - s[:, picks].mean(axis=2).max(axis=0)
    return float(np.percentile(margins, 2.5)), float(np.percentile(margins, 97.5))


def second_hop_variants(dense, bm25, queries: list[str], golds: list[Question]) -> dict[str, list[float]]:
    """Per-question recall of the four second-hop variants tried while designing `feedback=1` (with RRF): the top
    1 or 2 fused passages appended to the query, first-round rankings weighted 1x or 2x."""
    first = HybridIndex(dense, bm25, fusion="rrf")
    d1, b1 = dense.search(queries, first.depth), bm25.search(queries, first.depth)
    top = first.fuse(d1, b1, 2)
    out = {}
    for n_top in (1, 2):
        hop = [" ".join([q] + [f"{h.title} {h.text}" for h in row[:n_top]]) for q, row in zip(queries, top, strict=True)]
        d2, b2 = dense.search(hop, first.depth), bm25.search(hop, first.depth)
        for w in (1, 2):
            rows = [rrf_fuse(list(r), [0.5 * w, 0.5 * w, 0.5, 0.5], 10) for r in zip(d1, b1, d2, b2, strict=True)]
            out[f"top{n_top}_w{w}"] = recalls(rows, golds)
    return out


def selection_cv(variants: dict[str, list[float]], singles: list[list[float]], repeats: int = 50) -> float:
    """Out-of-sample margin of *choosing* a variant on these questions: split them in halves at random, pick the
    variant best on one half, score its margin over the best single method on the other; mean over both halves
    of `repeats` splits. This is the figure the in-sample best variant's margin overstates."""
    import random

    rng, n, out = random.Random(0), len(singles[0]), []

    def mean(xs: list[float], idx: list[int]) -> float:
        return sum(xs[i] for i in idx) / len(idx)

    for _ in range(repeats):
        order = list(range(n))
        rng.shuffle(order)
        halves = (order[: n // 2], order[n // 2:])
        for pick, score in (halves, halves[::-1]):
            best = max(variants, key=lambda v: mean(variants[v], pick))
            out.append(mean(variants[best], score) - max(mean(s, score) for s in singles))
    return sum(out) / len(out)


def timed_search(index, queries: list[str]):
    start = time.perf_counter()
    rows = index.search(queries, k=10)
    return rows, len(queries) / (time.perf_counter() - start)


def sentence_corpus(corpus: dict[str, list[str]]) -> list[dict[str, str]]:
    return [{"id": f"{title}#{i}", "title": title, "text": sent.strip()}
            for title, sents in corpus.items() for i, sent in enumerate(sents) if sent.strip()]


def build(passages, embedder: Embedder) -> tuple[DenseIndex, BM25Index, dict[str, float]]:
    """Both members over `passages`, with their build times (s per 1,000 passages; embedding is the dense cost)."""
    start = time.perf_counter()
    bm25 = BM25Index().build(passages)
    times = {"bm25_build_s_per_1k": 1000 * (time.perf_counter() - start) / len(passages)}
    start = time.perf_counter()
    dense = DenseIndex(embedder).build(passages)
    times["dense_build_s_per_1k"] = 1000 * (time.perf_counter() - start) / len(passages)
    return dense, bm25, times


def evaluate(dense: DenseIndex, bm25: BM25Index, queries: list[str], golds: list[Question], embedder: Embedder,
             two_hop: bool = True) -> dict:
    """Recall@10 and queries/s of each method; each timed search starts with a cold query cache."""
    out: dict = {}
    indexes = {"bm25": bm25, "dense": dense, "hybrid": HybridIndex(dense, bm25),
               "hybrid_rrf": HybridIndex(dense, bm25, fusion="rrf")}
    if two_hop:
        indexes["hybrid_2hop"] = HybridIndex(dense, bm25, feedback=1)
    per_q = {}
    for name, index in indexes.items():
        embedder.clear_cache()
        rows, out[f"{name}_qps"] = timed_search(index, queries)
        per_q[name] = recalls(rows, golds)
    per_q["default"] = nested_recall(weight_recalls(indexes["hybrid"], golds, k=10))
    singles = [per_q["dense"], per_q["bm25"]]
    for name, values in per_q.items():
        out[f"recall10_{name}"] = sum(values) / len(golds)
    for name in [n for n in per_q if n not in ("dense", "bm25")]:
        out[f"margin_{name}"] = out[f"recall10_{name}"] - max(out["recall10_dense"], out["recall10_bm25"])
        out[f"margin_{name}_ci"] = margin_interval(per_q[name], singles)
    if two_hop:
        out["margin_2hop_cv"] = selection_cv(second_hop_variants(dense, bm25, queries, golds), singles)
    return out


def report(fig: dict, suffix: str = "") -> None:
    names = [n for n in ("dense", "bm25", "default", "hybrid", "hybrid_rrf", "hybrid_2hop") if f"recall10_{n}" in fig]
    for name in names:
        print(f"RESULT recall10_{name}{suffix}={fig[f'recall10_{name}']:.3f}")
    for name in names[2:]:
        low, high = fig[f"margin_{name}_ci"]
        print(f"INFO {name}{suffix}: {fig[f'margin_{name}']:+.3f} over the best single method "
              f"(paired bootstrap 95% interval {low:+.3f} .. {high:+.3f})")
    if "margin_2hop_cv" in fig:
        print(f"INFO margin_2hop_cv{suffix}: the margin of choosing among the 4 second-hop variants on half the "
              "questions, scored on the other half")
        print(f"RESULT recall10_margin_2hop_cv{suffix}={fig['margin_2hop_cv']:+.3f}")


def faiss_100k(n: int = 100_000, dim: int = 384, queries: int = 1000, batch: int = 256) -> dict[str, float]:
    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.standard_normal((n, dim), dtype=np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    source = rng.choice(n, queries, replace=False)
    q = base[source] + 0.01 * rng.standard_normal((queries, dim), dtype=np.float32)
    out, ids = {}, {}
    for kind in ("flat", "hnsw"):
        start = time.perf_counter()
        index = new_index(base, kind)
        out[f"{kind}_build_s"] = time.perf_counter() - start
        faiss_search(index, kind, q[:batch], 10)  # warm-up
        start = time.perf_counter()
        ids[kind] = np.vstack([faiss_search(index, kind, q[i:i + batch], 10)[1] for i in range(0, queries, batch)])
        out[f"{kind}_qps"] = queries / (time.perf_counter() - start)
        out[f"{kind}_planted_recall"] = float(np.mean([s in row for s, row in zip(source, ids[kind], strict=True)]))
    out["knn_recall"] = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids["hnsw"], ids["flat"], strict=True)]))
    return out


def without_titles(passages):
    return [dict(p, title="") for p in passages]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", default=os.environ.get("ORCHESTRA_SHARED_DATA", str(DEFAULT_DATA)))
    parser.add_argument("--queries", type=int, default=1000, help="queries for the 100k FAISS figure")
    parser.add_argument("--weakened", action="store_true", help="also the four weakened-member variants")
    parser.add_argument("--no-faiss", action="store_true", help="skip the 100k FAISS figure")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: 8 questions over their own context paragraphs, no FAISS (a check that it runs)")
    args = parser.parse_args()
    base = Path(args.shared_data) / "retrieval" / "hotpotqa"
    questions = json.loads((base / "hotpotqa_train_100.json").read_text())
    corpus_path = base / "hotpotqa_train_100_corpus.json"
    if args.smoke:
        import atexit
        import tempfile

        questions, args.no_faiss = questions[:8], True
        keep = {title for q in questions for title, _ in q["context"]}
        small = {t: v for t, v in json.loads(corpus_path.read_text()).items() if t in keep}
        fd, name = tempfile.mkstemp(suffix=".json", prefix="orchestra-bench-retrieval-")
        os.close(fd)
        corpus_path = Path(name)
        atexit.register(corpus_path.unlink, missing_ok=True)
        corpus_path.write_text(json.dumps(small))
    queries = [q["question"] for q in questions]
    embedder = Embedder()

    passages = load_passages(corpus_path)
    golds = [Question(q["question"], frozenset(t for t, _ in q["supporting_facts"]), "id") for q in questions]
    dense, bm25, times = build(passages, embedder)
    hp = evaluate(dense, bm25, queries, golds, embedder)
    print(f"HotpotQA passages: {len(questions)} questions, {len(passages)} passages; build per 1,000 passages: dense "
          f"{times['dense_build_s_per_1k']:.1f} s (embedding), bm25 {times['bm25_build_s_per_1k']:.2f} s")
    print(f"RESULT retrieval_build_s_per_1k={times['dense_build_s_per_1k'] + times['bm25_build_s_per_1k']:.1f}")
    report(hp)
    for key in ("dense_qps", "bm25_qps", "hybrid_qps", "hybrid_2hop_qps"):
        print(f"RESULT {key}={hp[key]:.1f}")

    sentences = sentence_corpus(json.loads(corpus_path.read_text()))
    sent_golds = [Question(q["question"], frozenset(f"{t}#{i}" for t, i in q["supporting_facts"]), "id")
                  for q in questions]
    missing = sum(g not in {p["id"] for p in sentences} for q in sent_golds for g in q.gold)
    s_dense, s_bm25, s_times = build(sentences, embedder)
    st = evaluate(s_dense, s_bm25, queries, sent_golds, embedder)
    print(f"HotpotQA sentences: {len(questions)} questions, {len(sentences)} sentences, "
          f"{sum(len(q.gold) for q in sent_golds)} gold ({missing} absent from the corpus); build per 1,000: dense "
          f"{s_times['dense_build_s_per_1k']:.1f} s")
    report(st, "_sentences")

    if args.weakened:
        for name, (members, qs) in {"passages": ((dense, bm25), golds),
                                    "sentences": ((s_dense, s_bm25), sent_golds)}.items():
            corpus = passages if name == "passages" else sentences
            weak_dense, weak_bm25, _ = build(without_titles(corpus), embedder)
            for tag, pair in (("weak_bm25", (members[0], weak_bm25)), ("weak_dense", (weak_dense, members[1]))):
                print(f"HotpotQA {name}, {tag.replace('_', ' ')} (it sees no titles):")
                report(evaluate(*pair, queries, qs, embedder, two_hop=False), f"_{name}_{tag}")

    if args.no_faiss:
        return
    fx = faiss_100k(queries=args.queries)
    print(f"FAISS 100k x 384: build flat {fx['flat_build_s']:.1f} s, hnsw {fx['hnsw_build_s']:.1f} s (M 32, "
          f"efConstruction 80, efSearch 128); planted recall@10 flat {fx['flat_planted_recall']:.3f}, "
          f"hnsw {fx['hnsw_planted_recall']:.3f}")
    print(f"RESULT faiss_qps_100k={fx['hnsw_qps']:.0f}")
    print(f"RESULT faiss_flat_qps_100k={fx['flat_qps']:.0f}")
    print(f"RESULT faiss_ann_recall_ratio_100k={fx['hnsw_planted_recall'] / fx['flat_planted_recall']:.3f}")
    print(f"RESULT faiss_ann_knn_recall_100k={fx['knn_recall']:.3f}")


if __name__ == "__main__":
    main()
