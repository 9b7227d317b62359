"""FAISS index types for the dense retriever, the choice among them by corpus size, and allow-listed search.

All indexes score by inner product over L2-normalised vectors (= cosine):
* `flat` — `IndexFlatIP`, exact; what `auto` picks below `HNSW_MIN_VECTORS` vectors, where exact search is
  already cheap (and a graph would only cost build time and recall).
* `hnsw` — `IndexHNSWFlat` with inner product: graph ANN, no training, incremental adds; what `auto` picks
  from `HNSW_MIN_VECTORS` vectors up. `ef_search` trades recall for speed at query time.
* `ivf` — `IndexIVFFlat`: trained k-means lists, `nprobe` of them searched.

Allow-lists are applied inside FAISS (`IDSelectorBatch` in SearchParameters) and exactly: k allowed hits come
back whenever k are allowed. HNSW accepts a selector (`SearchParametersHNSW.sel`), but filtered nodes still
steer the graph walk, so a small allow-list is mostly never reached (measured: 0 of 5 allowed ids returned at
efSearch 64 on 100k vectors). Filtered HNSW searches therefore run on the index's own flat storage — the same
vectors, exact, no copy; allow-lists are per task and small. IVF probes every list when filtering, for the same
reason. This module knows nothing about passages or embeddings (tools/retrieval/corpus.py, dense.py).
"""

from __future__ import annotations

from typing import Any

INDEX_TYPES = ("auto", "flat", "hnsw", "ivf")
HNSW_MIN_VECTORS = 20_000  # below this, flat search of a batch costs < 1 ms per query on one core


def choose_index_type(n_vectors: int, index_type: str = "auto", hnsw_min_vectors: int = HNSW_MIN_VECTORS) -> str:
    """The concrete index type: `index_type` itself, or for `auto` flat below `hnsw_min_vectors`, else hnsw."""
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")
    if index_type != "auto":
        return index_type
    return "hnsw" if n_vectors >= hnsw_min_vectors else "flat"


def new_index(vectors, index_type: str, nlist: int = 64, hnsw_m: int = 32, ef_construction: int = 80):
    """A FAISS index of concrete `index_type` holding `vectors` (float32 [n, dim], normalised), trained if needed."""
    import faiss

    dim = vectors.shape[1]
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, int(hnsw_m), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(ef_construction)
    elif index_type == "ivf":
        nlist = max(1, min(int(nlist), len(vectors) // 39))  # faiss wants >= 39 training points per list
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
    else:
        raise ValueError(f"index_type must be flat, hnsw or ivf once built, got {index_type!r}")
    index.add(vectors)
    return index


def search(index, index_type: str, vectors, k: int, allowed=None, nprobe: int = 8, ef_search: int = 128):
    """(scores, ids) of the top k per query row; `allowed` (sorted int64 positions) restricts the hits exactly."""
    import faiss

    if allowed is not None:
        sel = faiss.IDSelectorBatch(allowed)
        if index_type == "hnsw":
            return faiss.downcast_index(index.storage).search(vectors, k, params=faiss.SearchParameters(sel=sel))
        if index_type == "ivf":
            return index.search(vectors, k, params=faiss.SearchParametersIVF(sel=sel, nprobe=index.nlist))
        return index.search(vectors, k, params=faiss.SearchParameters(sel=sel))
    params: Any = None
    if index_type == "hnsw":
        params = faiss.SearchParametersHNSW(efSearch=max(int(ef_search), k))
    elif index_type == "ivf":
        params = faiss.SearchParametersIVF(nprobe=int(nprobe))
    return index.search(vectors, k, params=params)
