"""Benchmark loaders on the shared files (row counts as ../shared/data/SOURCES.md states)."""

import json

import pytest

from orchestra.data.loaders import LOADERS, load

CASES = [("frames", "frames/frames_824.jsonl", 824), ("gsm8k", "math/gsm8k_test.jsonl", 1319),
         ("math500", "math/math500_test.jsonl", 500), ("nq_open", "retrieval/nq_open/NQ-open.dev.jsonl", 3610),
         ("hotpotqa", "retrieval/hotpotqa/hotpotqa_train_100.json", 100)]


@pytest.mark.parametrize("name,rel,count", CASES)
def test_row_counts_and_fields(shared_data, name, rel, count):
    ts = load(name, shared_data / rel, mapping={"answer-1": "gpt-5"})
    assert len(ts.tasks) == count
    assert len({t.id for t in ts.tasks}) == count
    for t in ts.tasks[:50]:
        assert t.problem and t.answer and t.data_source == name
        assert t.model_mapping == {"answer-1": "gpt-5"} and "answer" in t.tools


def test_gsm8k_final_answer_after_hashes(shared_data):
    first = load("gsm8k", shared_data / "math/gsm8k_test.jsonl", limit=1).tasks[0]
    assert first.answer == "18"  # Janet's ducks: 16 - 3 - 4 = 9 eggs at $2


def test_nq_aliases_kept(shared_data):
    t = load("nq_open", shared_data / "retrieval/nq_open/NQ-open.dev.jsonl", limit=1).tasks[0]
    assert t.answer == "14 December 1972 UTC" and t.meta["answer_aliases"] == ["December 1972"]


def test_hotpotqa_corpus_holds_gold_paragraphs(shared_data):
    ts = load("hotpotqa", shared_data / "retrieval/hotpotqa/hotpotqa_train_100.json")
    ids = {p["id"] for p in ts.corpus}
    assert len(ts.corpus) == 994  # SOURCES.md: 994 paragraphs, every supporting-fact title present
    assert all(d in ids for t in ts.tasks for d in t.meta["doc_ids"])


def test_mmlu_pro_from_routing_zip(shared_data):
    ts = load("mmlu_pro", shared_data / "routing/mmlu_pro/model_outputs_gemini-1.5-pro-002_5shots.zip")
    assert len(ts.tasks) == 12020
    t = ts.tasks[0]
    assert t.answer in "ABCDEFGHIJ" and "(A) " in t.problem and t.meta["question_id"] == t.id.split("-", 1)[1]


def test_hle_only_from_local_file(tmp_path):
    with pytest.raises(ValueError, match="local file"):
        load("hle", "")
    with pytest.raises(ValueError, match="gated"):
        load("hle", "hf:cais/hle")
    path = tmp_path / "hle.jsonl"
    rows = [{"id": "q1", "question": "What is 2+2?", "answer": "4", "answer_type": "exactMatch", "image": ""},
            {"id": "q2", "question": "Name the bird.", "answer": "owl", "image": "data:image/png;base64,xx"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    ts = load("hle", path)
    assert [t.id for t in ts.tasks] == ["hle-q1"] and ts.tasks[0].meta["skipped_image_rows"] == 1


def test_unknown_loader_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="choose one of"):
        load("squad", tmp_path / "x.jsonl")
    with pytest.raises(FileNotFoundError):
        load("gsm8k", tmp_path / "missing.jsonl")
    assert set(LOADERS) == {"frames", "gsm8k", "math500", "hotpotqa", "nq_open", "mmlu_pro", "hle"}
