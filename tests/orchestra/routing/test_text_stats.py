"""The estimator's `text` candidate (orchestra/routing/text_stats.py, select.py, estimator.py): the statistics by
hand, the feature layout, the selection finding them where only the text's length tells, the other kinds never
reading them (the $ / seconds ridges do: tests/orchestra/routing/test_spend.py), save and load, and the meta rule's
view of a part that reads no meta."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orchestra.routing import select
from orchestra.routing.estimator import RouteEstimator, TaskFeatures
from orchestra.routing.plans import Outcome, Plan
from orchestra.routing.text_stats import NAMES, text_stats
from orchestra.types import Task

A = Plan("answer-1", (("answer", "answer-1"),))
B = Plan("answer-2", (("answer", "answer-2"),))


def test_statistics_by_hand():
    got = text_stats(["What is 2+3? \\frac{1}{2} costs $4.50.", ""])
    # 37 chars, 6 words, numbers 2 3 1 2 4.50 (8 digits), a $, one backslash, one '+', '?' and two '.', 4 words
    want = [np.log1p(37), np.log1p(6), np.log1p(5), np.log1p(8), 1.0, np.log1p(1), np.log1p(1), np.log1p(3),
            np.log1p(4)]
    assert got.shape == (2, len(NAMES)) and got[0] == pytest.approx(want) and not got[1].any()


def task(i: int, words: int, family: str = "f") -> Task:
    return Task(id=f"t{i}", category="qa", problem=" ".join(["word"] * words), answer="x", data_source="toy",
                meta={"family": family})


def noise(texts: list[str]) -> np.ndarray:  # an embedding that says nothing, the same for the same text
    return np.stack([np.random.default_rng(len(t) * 7919 + 1).normal(size=8) for t in texts])


def test_features_end_with_the_statistics_after_the_meta_one_hots():
    tasks = [task(0, 3, "a"), task(1, 5, "b")]
    f = TaskFeatures(noise, ["family"], text_stats=True).fit_vocab(tasks)
    X = f(tasks)
    assert (f.n_meta, f.n_stats) == (2, len(NAMES)) and X.shape == (2, 8 + 2 + len(NAMES))
    assert X[:, 8:10].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert X[:, 10:] == pytest.approx(text_stats([t.problem for t in tasks]))
    assert TaskFeatures(noise, ["family"]).fit_vocab(tasks).n_stats == 0


def length_log(n: int, seed: int) -> tuple[list[Task], list[Outcome]]:
    """Plan A is right on short questions (< 20 words) 90 % of the time, on long ones 10 %; B half the time."""
    rng = np.random.default_rng(seed)
    tasks = [task(i, int(w)) for i, w in enumerate(rng.integers(3, 40, n))]
    outs = [Outcome(t.id, "answer-1", bool(rng.random() < (0.9 if len(t.problem.split()) < 20 else 0.1)), 0.02, 1.0)
            for t in tasks]
    return tasks, outs + [Outcome(t.id, "answer-2", bool(rng.random() < 0.5), 0.001, 1.0) for t in tasks]


def test_the_selection_finds_the_text_where_only_its_length_tells_and_it_survives_save_and_load(tmp_path):
    tasks, outs = length_log(240, 0)
    f = TaskFeatures(noise, text_stats=True)
    est = RouteEstimator([A, B]).fit(f(tasks), [t.id for t in tasks], outs, n_stats=f.n_stats)
    assert "text" in (est.model.get("parts") or [est.model["kind"]]) and est.model["n_stats"] == len(NAMES)
    assert "text stats" in est.selection["scores"]
    short, long_ = [task(900, 5)], [task(901, 35)]
    p_short, p_long = est.expected(f(short)).p_correct[0, 0], est.expected(f(long_)).p_correct[0, 0]
    assert p_short > 0.6 > 0.4 > p_long
    assert est.coef["cost_w"].shape == (2, 8 + len(NAMES)) and est.model["spend"] == "log"  # $: logs, statistics
    est.save(tmp_path / "r")
    back, _ = RouteEstimator.load(tmp_path / "r")
    Xq = f([task(i + 1000, w) for i, w in enumerate((4, 12, 19, 25, 38))])
    assert back.expected(Xq).p_correct == pytest.approx(est.expected(Xq).p_correct)
    assert back.expected(Xq).cost_usd == pytest.approx(est.expected(Xq).cost_usd)


def test_without_statistics_there_is_no_text_candidate_and_a_file_lacking_its_arrays_is_refused(tmp_path):
    tasks, outs = length_log(120, 1)
    f = TaskFeatures(noise)
    est = RouteEstimator([A, B]).fit(f(tasks), [t.id for t in tasks], outs)
    assert not any("text" in k for k in est.selection["scores"]) and est.model["n_stats"] == 0
    est.save(tmp_path / "r")
    meta = json.loads((tmp_path / "r" / "estimator.json").read_text())
    meta["model"].update(kind="text", parts=["text"])
    (tmp_path / "r" / "estimator.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="lacks.*text_w"):
        RouteEstimator.load(tmp_path / "r")


def test_a_text_part_reads_no_meta_for_the_one_standard_error_rule():
    assert not select.uses_meta(select.Candidate("text"))
    assert select.uses_meta(select.Candidate("blend", meta=True, parts=("logistic", "text")))
    assert not select.uses_meta(select.Candidate("blend", meta=False, parts=("logistic", "text")))
    assert select.uses_meta(select.Candidate("blend", s=5.0, parts=("family", "text")))
