"""Retrieval on your own corpus: z-score fusion, the weight fit (cross-validated, the rule kept unless it loses) and
its save/load, questions files and their errors, and the CLI's build/search/eval — on tiny made-up corpora. Most
tests stand a deterministic stub in for the embedding model (a dense member that is useless, or misleading, on
purpose); one runs the shipped example (examples/retrieval) through the real model end to end."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tools.retrieval.__main__ import main
from tools.retrieval.bm25 import BM25Index
from tools.retrieval.corpus import Hit, load_passages
from tools.retrieval.dense import DenseIndex
from tools.retrieval.fit import MIN_QUESTIONS, RULE_WEIGHT, WEIGHTS, choose, fit, nested_recall
from tools.retrieval.fusion import zscore_fuse
from tools.retrieval.hybrid import HybridIndex
from tools.retrieval.questions import Question, load_questions

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "retrieval"
TOPICS = ["anchor", "beacon", "copper", "dune", "ember", "fjord", "glacier", "harbor", "island", "jetty", "kelp",
          "lagoon", "meadow", "nickel", "orchard", "prairie"]


def hits(*pairs):
    return [Hit(d, "", "", s) for d, s in pairs]


def test_zscore_fusion_standardises_each_ranking():
    # ranking 1: A 3, B 2, C 1 -> z +1.22, 0, -1.22; ranking 2: B 10, D 0 -> z +1, -1 (A and C absent: -1)
    fused = zscore_fuse([hits(("A", 3), ("B", 2), ("C", 1)), hits(("B", 10), ("D", 0))], [0.5, 0.5], k=10)
    assert [h.doc_id for h in fused] == ["B", "A", "C", "D"]
    assert fused[0].score == pytest.approx(0.5 * 0 + 0.5 * 1)
    assert fused[1].score == pytest.approx(0.5 * 1.5 ** 0.5 - 0.5)
    assert fused[3].score == pytest.approx(0.5 * -(1.5 ** 0.5) - 0.5)  # absent from ranking 1: its floor
    # the scale of a ranking's scores does not matter, only their spread
    scaled = zscore_fuse([hits(("A", 300), ("B", 200), ("C", 100)), hits(("B", 10), ("D", 0))], [0.5, 0.5], k=10)
    assert [(h.doc_id, round(h.score, 9)) for h in scaled] == [(h.doc_id, round(h.score, 9)) for h in fused]
    # weight 0 ignores a ranking; a lone hit beats what its ranking lacks by 1; ties keep first-seen order
    assert [h.doc_id for h in zscore_fuse([hits(("A", 1), ("B", 2)), hits(("C", 9))], [1.0, 0.0], 3)] == \
           ["B", "A", "C"]
    assert [h.doc_id for h in zscore_fuse([hits(("X", 5)), hits(("Y", 7))], [0.5, 0.5], 2)] == ["X", "Y"]
    assert zscore_fuse([[], []], [0.5, 0.5], 3) == []


def test_choose_keeps_the_rule_unless_a_fitted_weight_wins_out_of_sample():
    n = 20
    rule = WEIGHTS.index(RULE_WEIGHT)
    # every weight equal: the rule stays (ties go to it)
    flat = [[0.5] * n for _ in WEIGHTS]
    assert choose(flat, list(range(n))) == (rule, False, 0.5)
    # BM25 alone (weight 0) finds everything, the more dense weight the less: the fit moves to 0
    slope = [[1.0 - w] * n for w in WEIGHTS]
    j, adopted, cv = choose(slope, list(range(n)))
    assert (WEIGHTS[j], adopted, cv) == (0.0, True, 1.0)
    assert nested_recall(slope) == [1.0] * n
    # too few questions: nothing is fitted
    assert choose(slope, list(range(MIN_QUESTIONS - 1))) == (rule, False, 0.5)
    # a weight best on one question only does not win out of sample
    spike = [[0.5] * n for _ in WEIGHTS]
    spike[2][7] = 1.0
    assert choose(spike, list(range(n)))[:2] == (rule, False)


class StubEmbedder:
    """A dense member that misleads: each query embeds as the passage `shift` places after its own, so dense
    ranks a wrong passage first, confidently. Deterministic; no model."""

    dim, model_dir = 16, "stub"

    def __init__(self, vectors, texts: list[str], shift: int = 1):
        self.vectors, self.texts, self.shift = vectors, texts, shift

    def encode_queries(self, queries):
        out = []
        for q in queries:
            own = [i for i, t in enumerate(self.texts) if t.split()[0] in q.split()]
            out.append(self.vectors[(own[0] + self.shift) % len(self.vectors)] if own else self._noise(q))
        return np.stack(out).astype(np.float32)

    def _noise(self, q):
        v = np.random.default_rng(int(hashlib.sha1(q.encode()).hexdigest()[:8], 16)).standard_normal(self.dim)
        return v / np.linalg.norm(v)


def misled_hybrid() -> tuple[HybridIndex, list[Question]]:
    passages = [{"id": f"d{i}", "title": "", "text": f"{w} notes, {w} facts"}
                for i, w in enumerate(TOPICS)]
    vectors = np.random.default_rng(0).standard_normal((len(passages), 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    embedder = StubEmbedder(vectors, [p["text"] for p in passages])
    index = HybridIndex(DenseIndex(embedder), BM25Index()).build(passages, vectors=vectors)
    questions = [Question(f"what about the {w}", frozenset({f"d{i}"}), "id") for i, w in enumerate(TOPICS)]
    return index, questions


def test_fit_moves_off_a_misleading_member_and_is_saved_and_loaded(tmp_path):
    index, questions = misled_hybrid()
    rule_rows = index.search([q.text for q in questions], k=1)
    assert sum(q.recall(r, 1) for q, r in zip(questions, rule_rows, strict=True)) < len(questions)  # the rule errs
    result = fit(index, questions, k=1)
    assert result.adopted and result.dense_weight < RULE_WEIGHT and result.recall_fitted_cv > result.recall_rule
    assert index.dense_weight == result.dense_weight and index.fit["adopted"]
    assert "adopted dense weight" in result.summary()
    rows = index.search([q.text for q in questions], k=1)
    assert all(q.recall(r, 1) == 1.0 for q, r in zip(questions, rows, strict=True))
    saved = index.save(tmp_path / "idx")
    info = json.loads((saved / "info.json").read_text())
    assert info["fusion"] == "zscore" and info["dense_weight"] == result.dense_weight and info["fit"]["adopted"]
    again = HybridIndex.load(saved, index.dense.embedder)
    assert (again.dense_weight, again.fit, again.fusion, again.depth) == (index.dense_weight, index.fit, "zscore", 20)
    # a directory saved before fusion/fit existed loads with today's default fusion and no fit
    info = {k: v for k, v in info.items() if k not in ("fusion", "fit")} | {"depth": 100, "dense_weight": 0.5}
    (saved / "info.json").write_text(json.dumps(info))
    old = HybridIndex.load(saved, index.dense.embedder)
    assert (old.fusion, old.depth, old.dense_weight, old.fit) == ("zscore", 20, 0.5, None)
    with pytest.raises(ValueError, match="fusion"):
        HybridIndex(None, None, fusion="max")


def write(path: Path, rows) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def corpus(tmp_path) -> Path:
    return write(tmp_path / "corpus.jsonl", [{"id": f"d{i}", "title": w.title(), "text": f"All about the {w}."}
                                             for i, w in enumerate(TOPICS)])


def test_questions_files_and_their_errors(tmp_path, corpus):
    passages = load_passages(corpus)
    good = write(tmp_path / "q.jsonl", [{"question": "the kelp?", "supporting_ids": ["d10"]},
                                        {"question": "the dune?", "supporting_titles": ["Dune"]},
                                        {"question": "hotpot", "supporting_facts": [["Ember", 0], ["Fjord", 2]]},
                                        {"question": "musique", "paragraphs": [  # MuSiQue's layout
                                            {"idx": 0, "title": "Kelp", "paragraph_text": "..", "is_supporting": False},
                                            {"idx": 1, "title": "Dune", "paragraph_text": "..", "is_supporting": True}]}])
    qs = load_questions(good, passages)
    assert [(q.by, sorted(q.gold)) for q in qs] == [("id", ["d10"]), ("title", ["Dune"]),
                                                    ("title", ["Ember", "Fjord"]), ("title", ["Dune"])]
    assert qs[1].recall([Hit("d3", "Dune", "", 1.0)], 10) == 1.0 and qs[2].recall([Hit("d4", "Ember", "", 1)], 10) == 0.5
    as_list = tmp_path / "q.json"
    as_list.write_text(json.dumps([{"question": "x", "supporting_ids": ["d1"]}, {"question": "y"}]))
    bad = {
        "line 2: not valid JSON": ['{"question": "a", "supporting_ids": ["d1"]}', "{oops"],
        "line 1 field 'question'": [{"question": "", "supporting_ids": ["d1"]}],
        "line 1 field 'supporting_ids': 'nope' is no passage id": [{"question": "a", "supporting_ids": ["nope"]}],
        "line 1 field 'supporting_titles': expected a non-empty list": [{"question": "a", "supporting_titles": []}],
        "line 1 field 'paragraphs': no paragraph has is_supporting": [
            {"question": "a", "paragraphs": [{"title": "Dune", "is_supporting": False}]}],
        "line 1 field 'paragraphs': 'Atlantis' is no passage title": [
            {"question": "a", "paragraphs": [{"title": "Atlantis", "is_supporting": True}]}],
        "line 1: needs exactly one gold field": [{"question": "a", "supporting_ids": ["d1"],
                                                  "supporting_titles": ["Dune"]}],
    }
    for message, rows in bad.items():
        with pytest.raises(ValueError, match=f"^{tmp_path / 'bad.jsonl'} {message}".replace("[", r"\[")):
            load_questions(write(tmp_path / "bad.jsonl", rows), passages)
    with pytest.raises(ValueError, match=f"^{as_list} row 1: needs exactly one gold field"):
        load_questions(as_list, passages)
    with pytest.raises(FileNotFoundError, match="questions file not found"):
        load_questions(tmp_path / "none.jsonl", passages)


def test_bad_corpus_rows_name_file_line_and_field(tmp_path):
    cases = {"line 2 field 'text'": [{"id": "a", "text": "ok"}, {"id": "b", "text": 3}],
             "line 2 field 'id': duplicate passage id 'a'": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}],
             "line 1: not valid JSON": ["{"]}
    for message, rows in cases.items():
        with pytest.raises(ValueError, match=f"^{tmp_path / 'c.jsonl'} {message}"):
            load_passages(write(tmp_path / "c.jsonl", rows))


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_bm25_build_search_eval_and_bad_input(tmp_path, corpus, capsys):
    index = tmp_path / "idx"
    rc, out, _ = run(capsys, "build", "--corpus", corpus, "--out", index, "--kind", "bm25")
    assert rc == 0 and "wrote bm25 index of 16 passages" in out and "s per 1,000 passages" in out
    rc, out, _ = run(capsys, "search", "--index", index, "--query", "tell me about the glacier", "--k", "2")
    assert rc == 0 and out.splitlines()[1].split()[:1] == ["1"] and out.splitlines()[1].split()[2:] == ["d6", "Glacier"]
    questions = write(tmp_path / "q.jsonl", [{"question": f"what of the {w}?", "supporting_ids": [f"d{i}"]}
                                             for i, w in enumerate(TOPICS)])
    rc, out, _ = run(capsys, "eval", "--index", index, "--questions", questions, "--k", "1")
    assert rc == 0 and out.splitlines()[-1] == "recall@1 bm25 = 1.000"
    # bad input: one error line naming file, line and field; exit 2; nothing written
    bad = write(tmp_path / "bad.jsonl", [{"question": "q", "supporting_ids": ["d1"]}, {"question": "q"}])
    rc, out, err = run(capsys, "build", "--corpus", corpus, "--out", tmp_path / "new", "--questions", bad)
    assert rc == 2 and err == f"error: {bad} line 2: needs exactly one gold field of supporting_ids, " \
                              "supporting_titles, supporting_facts, paragraphs, got none\n"
    assert not (tmp_path / "new").exists()
    rc, _, err = run(capsys, "search", "--index", tmp_path / "missing", "--query", "x")
    assert rc == 2 and "no info.json" in err and len(err.splitlines()) == 1
    rc, _, err = run(capsys, "eval", "--index", index, "--questions", questions, "--fit")
    assert rc == 2 and err.startswith("error: --fit fits a hybrid index")
    rc, _, err = run(capsys, "search", "--index", index, "--query", "x", "--kind", "dense")
    assert rc == 2 and "holds a 'bm25' index, not 'dense'" in err


def test_cli_hybrid_on_the_shipped_example(tmp_path, capsys):
    """The README's commands, on examples/retrieval (made up: 24 passages, 14 questions) with the real model."""
    corpus, questions, index = EXAMPLES / "corpus.jsonl", EXAMPLES / "questions.jsonl", tmp_path / "idx"
    rc, out, err = run(capsys, "build", "--corpus", corpus, "--out", index, "--questions", questions)
    assert rc == 0, err
    assert "wrote hybrid index of 24 passages" in out and "fit on 14 questions, 5-fold" in out
    info = json.loads((index / "info.json").read_text())
    assert info["fit"]["questions"] == 14 and info["fusion"] == "zscore"
    rc, out, _ = run(capsys, "search", "--index", index, "--query", "Who designed the iron bridge over the Senn?",
                     "--k", "3")
    assert rc == 0 and out.splitlines()[1].split()[2] == "p11"
    rc, out, _ = run(capsys, "eval", "--index", index, "--questions", questions, "--k", "3", "--fit")
    lines = out.splitlines()
    assert rc == 0 and lines[0].startswith("fit on 14 questions") and "recall@3 of gold passage ids" in lines[1]
    names = [line.split()[0] for line in lines[2:-1]]
    assert names == ["bm25", "dense", "hybrid", *(["hybrid"] if "(dense weight" in out else []), "hybrid_2hop"]
    assert lines[-1].startswith("recall@3 hybrid (this index, dense weight")
    assert json.loads((index / "info.json").read_text())["fit"]["k"] == 3  # the refit was saved
