"""Preferences a tiny policy can read (issue 33): vectors sampled over a range, rendered in bins (one word per
weight bin, no numbers) by the one rendering training, evaluation and Serve share, labelled by the teacher for
the very vector drawn, and an adherence sweep that no training vector is on."""

from __future__ import annotations

import random

import numpy as np
import pytest

from orchestra.agent.prompt import Prompter, level, preference_text
from orchestra.config import ConfigError, load_config
from orchestra.preferences import (
    PRESETS,
    SWEEP_COSTS,
    check_disjoint,
    is_among,
    level_of,
    sample_range,
    sweep_vectors,
)
from orchestra.routing.estimator import Expected
from orchestra.routing.plans import Plan
from orchestra.routing.teacher import label_vectors, teacher_labels
from orchestra.types import Task
from tests.orchestra.agent.test_prompt import TOK, make_task

HALF_DECADES = (0.0562, 0.1778, 0.5623, 1.778)  # cpu_tiny's agent.preference_levels
STRONG, CHEAP = Plan("answer-1", (("answer", "answer-1"),)), Plan("answer-2", (("answer", "answer-2"),))


def _task(i: int = 0) -> Task:
    return Task(id=f"t{i}", problem="2+2?", answer="4", data_source="synthetic/arith",
                model_mapping={"answer-1": "big", "answer-2": "small"})


# ---------------------------------------------------------------- rendering in bins
def test_each_sweep_weight_falls_in_its_own_bin_and_a_bin_reads_alike():
    words = [level(w, 1.0, HALF_DECADES) for w in SWEEP_COSTS]
    assert words == ["minimal", "low", "medium", "high", "top"]
    assert level(0.0, 1.0, HALF_DECADES) == "none" and level(0.6, 2.0, HALF_DECADES) == "medium"  # ratio counts
    a = preference_text({"accuracy": 1.0, "cost": 0.21, "latency": 0.0}, words=True, numbers=False,
                        bounds=HALF_DECADES)
    b = preference_text({"accuracy": 1.0, "cost": 0.49, "latency": 0.0}, words=True, numbers=False,
                        bounds=HALF_DECADES)
    assert a == b == "Priorities: cost medium, latency none."  # same bins: the same text, no digits
    assert preference_text({"accuracy": 1.0, "cost": 0.6}, numbers=False, bounds=HALF_DECADES) != a


def test_default_rendering_is_unchanged():
    """Old checkpoints (and the tiny tokenizer's training text) keep the rendering they were made with."""
    text = preference_text(PRESETS["balanced"], words=True)
    assert text == "Preference weights: accuracy 1, cost 0.5, latency 0.2. Priorities: cost medium, latency low."


def test_prompter_renders_bins_only_when_numbers_are_off():
    task = make_task()
    task.pref = {"accuracy": 1.0, "cost": 0.03, "latency": 0.0}
    kw = {"preference_words": True, "preference_numbers": False, "preference_levels": HALF_DECADES}
    user = Prompter(TOK, **kw).reprompt_user(task, [], [], [])["content"]
    assert user.endswith("\n\nPriorities: cost minimal, latency none.") and "0.03" not in user
    first = Prompter(TOK, **kw).first_messages(task)[1]["content"]
    assert first.endswith("Priorities: cost minimal, latency none.")
    cfg = load_config(["experiment=cpu_tiny"])  # the default's rendering reaches every Prompter through one mapping
    assert cfg.agent.prompter_kwargs()["preference_numbers"] is cfg.agent.preference_numbers


# ---------------------------------------------------------------- the sweep and the training vectors
def test_the_sweep_is_disjoint_from_the_presets_and_the_check_names_a_shared_vector():
    sweep = list(sweep_vectors().values())
    check_disjoint(sweep, PRESETS.values())
    with pytest.raises(ValueError, match="cost': 0.3"):
        check_disjoint(sweep, [{"accuracy": 1.0, "cost": 0.3}])  # absent latency counts as 0
    assert is_among({"accuracy": 1, "cost": 0.1, "latency": 0}, sweep)
    assert not is_among({"accuracy": 1, "cost": 0.1, "latency": 0.2}, sweep)


def test_weights_as_levels_read_back_and_their_whole_part_is_the_half_decade():
    """agent.number_format=level (cpu_tiny): each weight per unit of accuracy as a level, 2 a decade, 5.5 at 1, one
    decimal; the note reads it back into the bins' words, and with cpu_tiny's bounds the word is the whole part's for
    every level, so the sweep's five points read as five words though no training weight reads as any of them."""
    from orchestra.agent.prompt import LEVEL_HEAD, parse_weights, preference_note
    from orchestra.preferences import weight_of_level

    assert [level_of(x) for x in (0.03, 0.1, 0.3, 1.0, 3.0, -0.1, 0.0, 1e-4, 500.0)] == \
        ["2.5", "3.5", "4.5", "5.5", "6.5", "-3.5", "0", "0.1", "9.9"]
    text = preference_text({"accuracy": 0.5, "cost": 0.15, "latency": 0.0, "tool:answer-1": -0.1}, number_format="level")
    assert text == LEVEL_HEAD + "cost 4.5, latency 0, tool:answer-1 -4.1."
    back = parse_weights(text + "<|im_end|>")
    assert back["accuracy"] == 1.0 and back["latency"] == 0.0 and back["cost"] == pytest.approx(0.3162, abs=1e-3)
    assert back["tool:answer-1"] == pytest.approx(-0.1995, abs=1e-3)
    bounds = load_config(["experiment=cpu_tiny"]).agent.preference_levels
    words = ["minimal", "minimal", "minimal", "low", "medium", "high", "top", "top", "top", "top"]  # by whole level
    assert all(level(weight_of_level(f"{lv / 10:.1f}"), 1.0, bounds) == words[lv // 10] for lv in range(1, 100))
    notes = [preference_note(preference_text(v, number_format="level") + "<", bounds) for v in sweep_vectors().values()]
    assert notes == [f"<think>cost {w}, latency none</think>" for w in ("minimal", "low", "medium", "high", "top")]


def test_the_note_copies_each_number_before_its_word_and_latency_has_words_of_its_own():
    """sft.note_numbers with agent.latency_words (cpu_tiny): the note copies each weight as the prompt shows it, opening
    with the prompt's own " cost" token, then the weight's bin word, the latency's from words no cost bin uses; the word
    stands right after the whole part it is read from, in every number format."""
    from orchestra.agent.prompt import preference_note
    from orchestra.policy.models import config_tokenizer

    cfg = load_config(["experiment=cpu_tiny"])
    a = cfg.agent
    assert cfg.sft.note_numbers and len(a.latency_words) == 5

    def note(pref: dict, fmt: str = "level") -> str:
        return preference_note(preference_text(pref, number_format=fmt) + "<|im_end|>", a.preference_levels,
                               a.latency_words, numbers=True)

    assert note({"accuracy": 1.0, "cost": 0.03, "latency": 0.0}) == "<think> cost 2.5 minimal, latency 0 none</think>"
    assert note({"accuracy": 1.0, "cost": 0.3, "latency": 0.3}) == "<think> cost 4.5 medium, latency 4.5 time</think>"
    assert note({"accuracy": 1.0, "cost": 2.0, "latency": 0.2, "tool:answer-1": -0.5}, "sci") == \
        "<think> cost 2.0e+0 top, latency 2.0e-1 time, avoids answer-1</think>"
    assert note({"accuracy": 1.0, "cost": 0.3, "latency": 0.0}, "plain") == "<think> cost 0.3 medium, latency 0 none</think>"
    # without numbers the note is the words alone, as before; shown words are copied whatever the flag
    assert preference_note(preference_text({"accuracy": 1.0, "cost": 0.3, "latency": 0.3}, number_format="level"),
                           a.preference_levels) == "<think>cost medium, latency medium</think>"
    words = preference_text({"accuracy": 1.0, "cost": 2.0, "latency": 2.0}, words=True, numbers=False,
                            bounds=a.preference_levels, latency_words=a.latency_words)
    assert words == "Priorities: cost top, latency milliseconds." and \
        preference_note(words, a.preference_levels, a.latency_words, numbers=True) == \
        "<think>cost top, latency milliseconds</think>"
    assert [level(w, 1.0, a.preference_levels, a.latency_words) for w in SWEEP_COSTS] == list(a.latency_words)
    tok = config_tokenizer(cfg.model)
    for word in a.latency_words:  # each one token, as the cost's words are
        assert len(tok.encode(f" {word}", add_special_tokens=False)) == 1, word
    # the note's " cost 4.5" is the prompt's own tokens: a copy
    prompt = tok.encode(preference_text({"accuracy": 1.0, "cost": 0.3}, number_format="level"), add_special_tokens=False)
    at = prompt.index(tok.encode(" cost", add_special_tokens=False)[0])
    assert tok.encode(note({"accuracy": 1.0, "cost": 0.3}), add_special_tokens=False)[1:5] == prompt[at:at + 4]


def test_range_draws_stay_in_range_and_are_redrawn_off_the_sweep():
    rng = random.Random(0)
    draws = [sample_range(rng, (0.01, 10.0), (0.1, 3.0), 0.5) for _ in range(400)]
    assert all(d["accuracy"] == 1.0 and 0.01 <= d["cost"] <= 10.0 for d in draws)
    assert 0.35 < np.mean([d["latency"] == 0 for d in draws]) < 0.65
    assert all(d["latency"] == 0 or 0.1 <= d["latency"] <= 3.0 for d in draws)
    # a range around a sweep weight: the draws that read as 0.1 to two significant digits (0.0995-0.105) or as its
    # level (3.5), as the prompt shows a weight in any number format, are drawn again, whatever their latency
    rng = random.Random(1)
    near = [sample_range(rng, (0.09, 0.11), (0.1, 3.0), 0.5, avoid=sweep_vectors().values()) for _ in range(200)]
    assert not any(is_among(d, sweep_vectors().values()) for d in near)
    assert not any(f"{d['cost']:.1e}" == "1.0e-01" for d in near) and min(d["cost"] for d in near) < 0.0995
    assert not any(level_of(d["cost"]) == "3.5" for d in near)  # nor as 0.1's level (0.0944-0.106)
    with pytest.raises(ValueError, match="avoided"):
        sample_range(random.Random(2), (0.1, 0.1), (0.1, 3.0), 1.0, avoid=sweep_vectors().values())


def test_label_vectors_over_a_range_are_seeded_and_never_on_the_sweep():
    vectors = [v for i in range(300) for v in label_vectors(_task(i), 4, 0, [], (0.02, 5.0), (0.1, 3.0), 0.5)]
    again = [v for i in range(300) for v in label_vectors(_task(i), 4, 0, [], (0.02, 5.0), (0.1, 3.0), 0.5)]
    assert vectors == again and len(vectors) == 1200
    check_disjoint(sweep_vectors().values(), vectors)
    assert len({v["cost"] for v in vectors}) > 500  # a continuum, not a ladder


def test_teacher_labels_follow_the_sampled_cost_weight():
    """Strong: right 95 % at 1 ¢; cheap: 60 % at 0.01 ¢ (cost_scale 1 ¢). EV(strong) − EV(cheap) = 0.35 − 0.99 w:
    the label must switch at w ≈ 0.354 of every sampled vector's own weight."""
    tasks = [_task(i) for i in range(40)]
    exp = Expected(np.tile([0.95, 0.6], (40, 1)), np.tile([0.01, 0.0001], (40, 1)), np.zeros((40, 2)))
    labels = teacher_labels(tasks, exp, [STRONG, CHEAP], sampled=3, seed=0, cost_scale=0.01, latency_scale=10.0,
                            fixed=[], sample_cost=(0.02, 5.0), sample_latency=(0.1, 3.0), latency_zero=1.0)
    assert len(labels) == 120
    for lab in labels:
        assert lab.plan.name == ("answer-1" if lab.task.pref["cost"] < 0.35 / 0.99 else "answer-2")
    assert {lab.plan.name for lab in labels} == {"answer-1", "answer-2"}


# ---------------------------------------------------------------- config keys
@pytest.mark.parametrize(("override", "key"), [
    ("sft.sample_cost=[1,0.1]", "sft.sample_cost"),
    ("sft.sample_latency=[0,1]", "sft.sample_latency"),
    ("sft.sample_latency_zero=2", "sft.sample_latency_zero"),
    ("agent.preference_levels=[0.1,0.05,1,2]", "agent.preference_levels"),
    ("agent.latency_words=[slow,wait,time,seconds,top]", "agent.latency_words"),
    ("agent.latency_words=[slow,wait,time]", "agent.latency_words"),
    ("agent.preference_numbers=false agent.preference_words=false", "agent.preference_numbers"),
    ("sft.vectors=[accuracy-first,'accuracy=1,cost=0.3']", "sft.vectors"),
    ("data.preference_pairs=balanced|accuracy=1,cost=3", "data.preference_pairs"),
])
def test_config_errors_name_the_key(override, key):
    with pytest.raises(ConfigError, match=f"^{key}:"):
        load_config(["experiment=cpu_tiny", *override.split(" ")])
