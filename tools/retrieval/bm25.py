"""Lexical retrieval: BM25 (bm25s) over the same passages and with the same interface as the dense index; the
baseline the dense index must beat. Allow-lists are applied inside the search (bm25s `weight_mask`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from tools.retrieval.corpus import Hit, Passage, PassageStore, doc_text, read_index_meta, write_index_meta


class BM25Index(PassageStore):
    """Lexical BM25 (bm25s) over the same passages; the baseline the dense index must beat."""

    kind = "bm25"

    def __init__(self, stopwords: str = "en"):
        self.stopwords = stopwords
        self.bm25 = None
        self._set_passages([])

    def _tokens(self, texts: list[str], as_ids: bool = True):
        import bm25s

        return bm25s.tokenize(texts, stopwords=self.stopwords, return_ids=as_ids, show_progress=False)

    def build(self, passages: list[Passage], progress: Callable[[int], None] | None = None) -> BM25Index:
        import bm25s

        self._set_passages(list(passages))
        self.bm25 = bm25s.BM25()
        self.bm25.index(self._tokens([doc_text(p) for p in self.passages]), show_progress=False)
        if progress:
            progress(len(self.passages))
        return self

    def search(self, queries: list[str], k: int = 10, allow_ids: Iterable[str] | None = None) -> list[list[Hit]]:
        import numpy as np

        if self.bm25 is None or not len(self):
            return [[] for _ in queries]
        allowed = self._allowed_positions(allow_ids)
        mask = None
        if allowed is not None:
            if not len(allowed):
                return [[] for _ in queries]
            mask = np.zeros(len(self), dtype=np.float32)
            mask[allowed] = 1.0
        k = min(k, len(self) if allowed is None else len(allowed))
        # bm25s tokenizes queries against its own vocabulary; unknown words simply score nothing.
        tokens = [[t for t in q if t in self.bm25.vocab_dict] for q in self._tokens(queries, as_ids=False)]
        ids, scores = self.bm25.retrieve(tokens, k=k, show_progress=False, weight_mask=mask, n_threads=0)
        # A score of 0 means no query term occurs in the passage: not a hit (and never a disallowed one).
        return [[self._hit(int(i), s) for i, s in zip(row_ids, row_scores, strict=True)
                 if s > 0 and (mask is None or mask[int(i)])]
                for row_ids, row_scores in zip(ids, scores, strict=True)]

    def save(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.bm25.save(str(out / "bm25"), show_progress=False)
        write_index_meta(out, self.passages, {"kind": self.kind, "count": len(self), "stopwords": self.stopwords})
        return out

    @classmethod
    def load(cls, index_dir: str | Path) -> BM25Index:
        import bm25s

        index_dir = Path(index_dir)
        passages, info = read_index_meta(index_dir, cls.kind)
        self = cls(stopwords=info.get("stopwords", "en"))
        self._set_passages(passages)
        self.bm25 = bm25s.BM25.load(str(index_dir / "bm25"), show_progress=False)
        return self
