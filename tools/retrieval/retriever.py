"""The retriever tool: hybrid (BM25 + dense, fused), dense (FAISS) or BM25 search over a passage corpus, with a
per-task allow-list.

* `Retriever` — tool "retrieve" (args {query, k?}); the allow-list of document ids comes from
  `ctx.task.meta["doc_ids"]`, as ToolOrchestra restricts retrieval per task. Allow-lists are applied inside
  the search, so k allowed hits come back exactly, never an over-fetched-and-filtered approximation.
* `build_index` / `build_retriever` — load a finished index directory or build one from a corpus, of kind
  `hybrid` (default; tools/retrieval/hybrid.py), `hybrid_2hop`, `dense` (dense.py) or `bm25` (bm25.py).
Passages and index directories are tools/retrieval/corpus.py; the CLI is `python -m tools.retrieval build | search
| eval` (a hybrid index built with the user's questions carries a fitted fusion weight: tools/retrieval/fit.py).
Result caching, concurrency and Ray are the tool server's business.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestra.schema import function_schema
from orchestra.types import Task, ToolContext, ToolResult
from tools.retrieval.bm25 import BM25Index
from tools.retrieval.corpus import SearchIndex, load_passages
from tools.retrieval.dense import DenseIndex, Embedder
from tools.retrieval.hybrid import HybridIndex


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
                          documents=docs, meta={"doc_ids": [h.doc_id for h in hits],
                                "scores": [round(h.score, 5) for h in hits]})


KINDS = ("hybrid", "hybrid_2hop", "dense", "bm25")  # hybrid_2hop: hybrid with a second-hop round (tools/retrieval/hybrid.py)


def new_search_index(kind: str, model_dir: str, index_type: str, batch_size: int, device: str) -> SearchIndex:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "bm25":
        return BM25Index()
    dense = DenseIndex(Embedder(model_dir, batch_size=batch_size, device=device), index_type=index_type)
    if kind == "dense":
        return dense
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
        index = HybridIndex.load(index_dir, embedder)
        index.feedback = int(kind == "hybrid_2hop")  # a search-time choice: the same saved index serves both kinds
        return index
    if corpus in ("", None):
        raise ValueError("no corpus given and no finished index in index_dir")
    passages = load_passages(corpus)
    index = new_search_index(kind, model_dir, index_type, batch_size, device)
    index.build(passages, progress=progress)
    if index_dir:
        index.save(index_dir)
    return index


def build_retriever(corpus: str | Path | list[dict[str, Any]] = "", index_dir: str | Path = "", model_dir: str = "",
                    index_type: str = "auto", top_k: int = 5, kind: str = "hybrid", batch_size: int = 32,
                    device: str = "cpu") -> Retriever:
    """The "retrieve" tool over a loaded-or-built index (flat keyword arguments, as RetrieverConfig names them)."""
    return Retriever(build_index(corpus, index_dir, model_dir, index_type, kind, batch_size, device), top_k=top_k)
