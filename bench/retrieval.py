"""Retrieval benchmark: dense (all-MiniLM-L6-v2 + FAISS flat) vs BM25 recall@10 and queries/s on the HotpotQA
corpus in shared data (100 questions, 994 passages), and FAISS flat batched queries/s on 100k x 384 random
normalised float32 vectors. Prints RESULT lines (names in DESIGN.md "Benchmarks"); leaves timing judgement
to the reader. Usage: python bench/retrieval.py [--shared-data DIR] [--queries 1000]
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

from tools.retriever import BM25Index, DenseIndex, Embedder, load_corpus  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def recall_at_10(rows, questions) -> float:
    per_q = []
    for q, row in zip(questions, rows, strict=True):
        gold = {title for title, _ in q["supporting_facts"]}
        per_q.append(len(gold & {h.doc_id for h in row}) / len(gold))
    return sum(per_q) / len(per_q)


def timed_search(index, queries: list[str]):
    start = time.perf_counter()
    rows = index.search(queries, k=10)
    return rows, len(queries) / (time.perf_counter() - start)


def faiss_qps(n: int = 100_000, dim: int = 384, queries: int = 1000, batch: int = 256) -> float:
    import faiss
    import numpy as np

    rng = np.random.default_rng(0)
    base = rng.standard_normal((n, dim), dtype=np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(dim)
    index.add(base)
    q = base[rng.choice(n, queries, replace=False)] + 0.01 * rng.standard_normal((queries, dim), dtype=np.float32)
    index.search(q[:batch], 10)  # warm-up
    start = time.perf_counter()
    for i in range(0, queries, batch):
        _, ids = index.search(q[i:i + batch], 10)
    return queries / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", default=os.environ.get("ORCHESTRA_SHARED_DATA", str(DEFAULT_DATA)))
    parser.add_argument("--queries", type=int, default=1000, help="queries for the 100k FAISS figure")
    args = parser.parse_args()
    base = Path(args.shared_data) / "retrieval" / "hotpotqa"
    questions = json.loads((base / "hotpotqa_train_100.json").read_text())
    passages = load_corpus(base / "hotpotqa_train_100_corpus.json")
    queries = [q["question"] for q in questions]

    start = time.perf_counter()
    bm25 = BM25Index().build(passages)
    bm25_build = time.perf_counter() - start
    bm25_rows, bm25_qps = timed_search(bm25, queries)

    start = time.perf_counter()
    dense = DenseIndex(Embedder()).build(passages)
    dense_build = time.perf_counter() - start
    dense_rows, dense_qps = timed_search(dense, queries)

    print(f"HotpotQA: {len(questions)} questions, {len(passages)} passages; build: dense {dense_build:.1f} s "
          f"(embedding), bm25 {bm25_build:.2f} s")
    print(f"RESULT recall10_dense={recall_at_10(dense_rows, questions):.3f}")
    print(f"RESULT recall10_bm25={recall_at_10(bm25_rows, questions):.3f}")
    print(f"RESULT dense_qps={dense_qps:.1f}")
    print(f"RESULT bm25_qps={bm25_qps:.1f}")
    print(f"RESULT faiss_qps_100k={faiss_qps(queries=args.queries):.0f}")


if __name__ == "__main__":
    main()
