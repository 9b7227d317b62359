"""Hybrid retrieval: BM25 (bm25s) and dense (FAISS) rankings of the same passages, fused into one.

`fusion="zscore"` (default) standardises each ranking's scores over its top `depth` hits (20, or k if larger) and
adds them, weighted (tools/retrieval/fusion.py says why: it does not fall below its stronger member where
reciprocal-rank fusion did). `fusion="rrf"` is weighted reciprocal-rank fusion with `rrf_k = 60`, each ranking read
to 100 hits: the previous default, kept for comparison. `dense_weight` is w_dense (w_bm25 = 1 - w_dense): 0.5 (equal
weights) unless it was fitted on the user's own questions (tools/retrieval/fit.py), in which case the fit is kept
in `fit` and saved beside it.

`feedback=1` (off by default) adds one second-hop round, as multi-hop retrievers do: the query followed by the title
and text of the first round's top passage is searched both ways again, and the four rankings are fused. A question
whose answer needs a second passage (a bridge entity named only in the first) finds it this way; it costs a second
search per query, with a passage-long text to embed.

Allow-lists go to both sub-searches, which filter inside their own search (tools/retrieval/dense.py, bm25.py), so
every fused hit is allowed and, because the dense side returns min(depth, allowed) hits, k allowed hits come back
whenever k are allowed — the same contract as a single index.

A saved hybrid index is a directory with `dense/` and `bm25/` (each a complete index directory) and its own
`info.json` (fusion settings and any fit), written last so that a half-written directory is never loaded.
Embedding, BM25 and FAISS details stay in tools/retrieval/dense.py, bm25.py and indexes.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tools.retrieval.bm25 import BM25Index
from tools.retrieval.corpus import Hit, Passage, atomic_write
from tools.retrieval.dense import DenseIndex, Embedder
from tools.retrieval.fusion import FUSIONS, rrf_fuse, zscore_fuse

__all__ = ["HybridIndex", "rrf_fuse", "zscore_fuse"]

DEFAULT_DEPTH = {"zscore": 20, "rrf": 100}  # how far each ranking is read (at least k), per fusion


class HybridIndex:
    """BM25 + dense over the same passages, fused. Build with `build`, persist with `save` / `load`."""

    kind = "hybrid"

    def __init__(self, dense: DenseIndex, bm25: BM25Index, fusion: str = "zscore", dense_weight: float = 0.5,
                 depth: int | None = None, rrf_k: int = 60, feedback: int = 0, fit: dict[str, Any] | None = None):
        if fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
        if not 0.0 <= dense_weight <= 1.0:
            raise ValueError(f"dense_weight must be in [0, 1], got {dense_weight}")
        depth = DEFAULT_DEPTH[fusion] if depth is None else depth
        if rrf_k < 1 or depth < 1:
            raise ValueError(f"rrf_k and depth must be >= 1, got {rrf_k}, {depth}")
        if feedback not in (0, 1):
            raise ValueError(f"feedback must be 0 (one round) or 1 (a second-hop round), got {feedback}")
        self.dense, self.bm25 = dense, bm25
        self.fusion, self.dense_weight, self.depth, self.rrf_k = fusion, float(dense_weight), int(depth), int(rrf_k)
        self.feedback = int(feedback)
        self.fit = fit  # how dense_weight was fitted (tools/retrieval/fit.py), or None: the equal-weight rule

    @property
    def passages(self) -> list[Passage]:
        return self.dense.passages

    def __len__(self) -> int:
        return len(self.dense)

    def build(self, passages: list[Passage], progress: Callable[[int], None] | None = None,
              vectors=None) -> HybridIndex:
        """Index `passages` both ways; `vectors` (normalised embeddings) skips the embedding, as in DenseIndex."""
        self.dense.build(passages, progress=progress, vectors=vectors)
        self.bm25.build(self.dense.passages)
        return self

    def search(self, queries: list[str], k: int = 10, allow_ids: Iterable[str] | None = None) -> list[list[Hit]]:
        """Top-k fused hits per query; with `allow_ids`, only those documents can be returned."""
        allow = list(allow_ids) if allow_ids is not None else None  # read twice below
        depth = max(k, self.depth)
        dense_rows = self.dense.search(queries, depth, allow)
        bm25_rows = self.bm25.search(queries, depth, allow)
        return self._rounds(queries, dense_rows, bm25_rows, k, allow)

    def search_vectors(self, vectors, queries: list[str], k: int = 10,
                       allow_ids: Iterable[str] | None = None) -> list[list[Hit]]:
        """`search` with the query embeddings computed elsewhere (the texts still feed BM25)."""
        allow = list(allow_ids) if allow_ids is not None else None
        depth = max(k, self.depth)
        dense_rows = self.dense.search_vectors(vectors, depth, allow)
        return self._rounds(queries, dense_rows, self.bm25.search(queries, depth, allow), k, allow)

    def fuse(self, dense_rows: list[list[Hit]], bm25_rows: list[list[Hit]], k: int,
             dense_weight: float | None = None) -> list[list[Hit]]:
        """Fuse each query's two rankings (read to `depth`, at least k) into its top k; `dense_weight` overrides
        the index's own (tools/retrieval/fit.py tries several on the same rankings)."""
        w = self.dense_weight if dense_weight is None else dense_weight
        return [self._fuse([d, b], [w, 1.0 - w], k) for d, b in zip(dense_rows, bm25_rows, strict=True)]

    def _fuse(self, rankings: list[list[Hit]], weights: list[float], k: int) -> list[Hit]:
        depth = max(k, self.depth)
        rankings = [r[:depth] for r in rankings]
        if self.fusion == "rrf":
            return rrf_fuse(rankings, weights, k, self.rrf_k)
        return zscore_fuse(rankings, weights, k)

    def _rounds(self, queries: list[str], dense_rows: list[list[Hit]], bm25_rows: list[list[Hit]], k: int,
                allow: list[str] | None) -> list[list[Hit]]:
        """The first round's fusion, or with `feedback` the fusion of both rounds' four rankings."""
        if not self.feedback:
            return self.fuse(dense_rows, bm25_rows, k)
        top = self.fuse(dense_rows, bm25_rows, 1)
        hop = [f"{q} {row[0].title} {row[0].text}" if row else q for q, row in zip(queries, top, strict=True)]
        depth = max(k, self.depth)
        dense2, bm25_2 = self.dense.search(hop, depth, allow), self.bm25.search(hop, depth, allow)
        weights = [self.dense_weight, 1.0 - self.dense_weight] * 2
        return [self._fuse(list(rankings), weights, k)
                for rankings in zip(dense_rows, bm25_rows, dense2, bm25_2, strict=True)]

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "count": len(self), "fusion": self.fusion, "dense_weight": self.dense_weight,
                "depth": self.depth, "rrf_k": self.rrf_k, "feedback": self.feedback, "fit": self.fit}

    def save_info(self, out_dir: str | Path) -> Path:
        """(Re)write only `info.json` (atomically): what a refit changes, without rewriting the indexes."""
        out = Path(out_dir)
        atomic_write(out / "info.json", lambda tmp: Path(tmp).write_text(json.dumps(self.info(), indent=1)))
        return out

    def save(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.dense.save(out / "dense")
        self.bm25.save(out / "bm25")
        return self.save_info(out)

    @classmethod
    def load(cls, index_dir: str | Path, embedder: Embedder) -> HybridIndex:
        index_dir = Path(index_dir)
        info_path = index_dir / "info.json"
        if not info_path.is_file():
            raise FileNotFoundError(f"{index_dir} is not a finished index directory (no info.json)")
        info = json.loads(info_path.read_text())
        if info.get("kind") != cls.kind:
            raise ValueError(f"{index_dir} holds a {info.get('kind')!r} index, not {cls.kind!r}")
        dense, bm25 = DenseIndex.load(index_dir / "dense", embedder), BM25Index.load(index_dir / "bm25")
        if [p["id"] for p in dense.passages] != [p["id"] for p in bm25.passages] or len(dense) != info["count"]:
            raise ValueError(f"{index_dir}: dense/ and bm25/ do not hold the same {info['count']} passages")
        # Directories saved before `fusion` existed (RRF, depth 100, equal weights, never fitted) get today's
        # default fusion: the fusion is a search-time choice, and the old one could fall below its better member.
        fusion = info.get("fusion", "zscore")
        depth = info["depth"] if "fusion" in info else None
        return cls(dense, bm25, fusion=fusion, dense_weight=info["dense_weight"], depth=depth,
                   rrf_k=info.get("rrf_k", 60), feedback=info.get("feedback", 0), fit=info.get("fit"))
