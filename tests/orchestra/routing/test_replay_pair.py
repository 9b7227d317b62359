"""orchestra/routing/holdout.py `replay_pair`: a two-model log cut from the MMLU-Pro replay zoo (shared data), its
verdicts the recorded ones, its split by seed, and its errors. A hashed bag of words stands in for MiniLM."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from orchestra.config import load_config
from orchestra.routing.holdout import compare, replay_pair
from tools.registry import build_experts


def embed(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), 16))
    for i, t in enumerate(texts):
        for w in t.lower().split():
            out[i, sum(map(ord, w)) % 16] += 1.0
    return out


@pytest.fixture(scope="module")
def zoo(shared_data):
    cfg = load_config(["experiment=mmlu_pro_replay"])
    return cfg, build_experts(cfg.zoo)


def _verdicts(path) -> dict[str, bool]:
    with zipfile.ZipFile(path) as z:
        return {str(r["question_id"]): r["pred"] == r["answer"] for r in json.loads(z.read(z.namelist()[0]))}


def test_pair_holds_the_recorded_verdicts_of_one_family_strong_first(zoo, shared_data):
    cfg, experts = zoo
    rec, train, test, cost_scale, _ = replay_pair(cfg, experts, embed, "gemini-1.5-pro-002", "mixtral-8x7b", ["math"])
    assert [p.name for p in rec.plans] == ["answer-1", "answer-2"] and rec.X.shape == (len(rec.tasks), 16)
    assert {t.meta["family"] for t in rec.tasks} == {"math"} and rec.n_meta == 0
    d = shared_data / "routing" / "mmlu_pro"
    pro = _verdicts(d / "model_outputs_gemini-1.5-pro-002_5shots.zip")
    mix = _verdicts(d / "model_outputs_Mixtral-8x7B-Instruct-v0.1_5shots.zip")
    qids = [str(t.meta["question_id"]) for t in rec.tasks]
    assert rec.correct[:, 0].tolist() == [float(pro[q]) for q in qids]
    assert rec.correct[:, 1].tolist() == [float(mix[q]) for q in qids]
    assert rec.cost[:, 0].mean() > rec.cost[:, 1].mean() and cost_scale == pytest.approx(rec.cost[:, 0].mean())
    assert rec.correct[:, 0].mean() > rec.correct[:, 1].mean()  # the usual reading: the pricier is the better
    assert len(test) == len(rec.tasks) // 4 and len(train) + len(test) == len(rec.tasks)
    assert not set(train) & set(test)
    again = replay_pair(cfg, experts, embed, "gemini-1.5-pro-002", "mixtral-8x7b", ["math"])
    other = replay_pair(cfg, experts, embed, "gemini-1.5-pro-002", "mixtral-8x7b", ["math"], seed=1, heldout=100)
    assert again[2] == test and len(other[2]) == 100 and set(other[2]) != set(test[:100])
    figures, lines = compare(rec, train[:300], test, cost_scale, 10.0, label="pair")
    assert 0.0 < figures["yardstick_apgr_oracle"] and "yardstick_apgr_estimator" in figures
    assert not any("less accurate" in line for line in lines)


def test_pair_errors_name_what_is_wrong(zoo):
    cfg, experts = zoo
    with pytest.raises(ValueError, match="two different experts.*gpt-5"):
        replay_pair(cfg, experts, embed, "gpt-5", "mixtral-8x7b", ["math"])
    with pytest.raises(ValueError, match="two different experts"):
        replay_pair(cfg, experts, embed, "mixtral-8x7b", "mixtral-8x7b", ["math"])
    with pytest.raises(ValueError, match=r"only 0 questions of families \['cooking'\]"):
        replay_pair(cfg, experts, embed, "gemini-1.5-pro-002", "mixtral-8x7b", ["cooking"])
