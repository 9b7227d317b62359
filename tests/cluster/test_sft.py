"""SFT demonstrations (orchestra/data/demos.py): plain random episodes, rejection sampling (sft.candidates > 1)
keeping the best-scoring of k random episodes per demonstration, ties to the earliest, and the teacher's scripted
episodes with rare labels repeated (sft.label_balance)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from orchestra.agent.scripted import call_text
from orchestra.data.demos import demo_samples, label_repeats, scripted_samples
from orchestra.data.synth.template import generate_tasks
from tests.helpers.fakes import ByteTokenizer

TARGET = "answer-math-2"


@pytest.fixture(scope="module")
def setup():
    from orchestra.config import load_config
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    zoo = load_config().zoo
    tasks = generate_tasks(6, 2, split="train", mapping=zoo.tiers).tasks
    tools = LocalToolClient(build_tools(dataclasses.replace(zoo, seed=0), names=["answer"]))
    return tasks, tools, ByteTokenizer()


def _tiers(samples, tok):
    return [re.search(r"answer-[a-z0-9-]+", tok.decode(s.response_ids)).group(0) for s in samples]


def test_best_of_k_keeps_the_top_scoring_episode(setup):
    tasks, tools, tok = setup
    seen: dict[str, list[str]] = {}

    async def scorer(traj, task):  # prefers one tier; records every candidate it was shown
        tier = re.search(r"answer-[a-z0-9-]+", traj.turns[-1].text).group(0)
        demo, k = traj.uid.rsplit("-", 1)
        seen.setdefault(demo, [None] * 8)[int(k)] = tier
        return 1.0 if tier == TARGET else 0.0

    kw = dict(prompter_kwargs={}, agent_kwargs={"max_turns": 1}, eos_ids=[tok.eos_token_id], n=12, seed=3)
    kept = _tiers(demo_samples(tasks, tools, tok, candidates=8, scorer=scorer, **kw), tok)
    assert len(kept) == 12 and len(seen) == 12 and all(None not in c for c in seen.values())
    order = sorted(seen, key=lambda d: int(d.split("-")[1]))
    # the target when any candidate had it, else the first candidate (every other one scored the same)
    assert kept == [TARGET if TARGET in seen[d] else seen[d][0] for d in order]
    assert kept.count(TARGET) >= 6  # (5/6)^8 = 23 % of demos lack it in expectation
    plain = _tiers(demo_samples(tasks, tools, tok, **kw), tok)
    assert plain == [seen[d][0] for d in order]  # candidate 0 is the plain demonstration: same draws
    with pytest.raises(ValueError, match="scorer"):
        demo_samples(tasks, tools, tok, candidates=2, **kw)


def test_label_repeats_lifts_rare_labels_by_the_square_root_of_their_rarity():
    labels = ["a"] * 50 + ["b"] * 40 + ["c"] * 8 + ["d"] * 2
    assert label_repeats(labels, 0.0) == [1] * 100  # off
    reps = dict(zip(labels, label_repeats(labels, 0.5), strict=True))
    # shares .5 / .4 / .08 / .02: sqrt(.5 / f) = 1, 1.12, 2.5, 5, rounded (2.5 to even), never below 1
    assert reps == {"a": 1, "b": 1, "c": 2, "d": 5}
    assert dict(zip(labels, label_repeats(labels, 1.0), strict=True)) == {"a": 1, "b": 2, "c": 4, "d": 7}


def test_scripted_samples_repeat_each_episode_as_asked(setup):
    tasks, tools, tok = setup
    scripts = [(t, [call_text("answer", {"model": tier})]) for t, tier in zip(tasks[:3], ("answer-math-1", "answer-math-2", "answer-math-3"), strict=True)]
    kw = dict(prompter_kwargs={}, agent_kwargs={"max_turns": 1}, eos_ids=[tok.eos_token_id])
    assert _tiers(scripted_samples(scripts, tools, tok, **kw), tok) == ["answer-math-1", "answer-math-2",
                                                                        "answer-math-3"]
    assert _tiers(scripted_samples(scripts, tools, tok, repeats=[1, 3, 2], **kw), tok) == [
        "answer-math-1", *["answer-math-2"] * 3, *["answer-math-3"] * 2]
    with pytest.raises(ValueError, match="2 repeat counts for 3 episodes"):
        scripted_samples(scripts, tools, tok, repeats=[1, 2], **kw)


@pytest.fixture
def restated(setup):
    """(a task under cost-first, the tools, the tokenizer, scripted_samples' keywords with the priorities shown in
    words, one answer call): a restated demonstration's makings."""
    from orchestra.preferences import preset

    tasks, tools, tok = setup
    task = dataclasses.replace(tasks[0], pref=preset("cost-first"))
    kw = dict(prompter_kwargs={"preference_words": True, "preference_numbers": False}, agent_kwargs={"max_turns": 1},
              eos_ids=[tok.eos_token_id])
    return task, tools, tok, kw, call_text("answer", {"model": "answer-math-2"})


def test_restated_demonstrations_open_every_call_with_the_prompts_priorities(restated):
    """sft.restate_preference: each demonstrated call is '<think>' + the prompt's priorities (and the router line's
    suggestion) + '</think>' + the call, which parses as the call; a call longer than sampling.max_tokens is refused,
    never dropped silently."""
    from orchestra.agent.parse import parse
    from orchestra.agent.prompt import preference_note

    task, tools, tok, kw, call = restated
    [sample] = scripted_samples([(task, [call])], tools, tok, note=preference_note, **kw)
    text = tok.decode(sample.response_ids)
    assert text.startswith("<think>cost top, latency low</think>" + call)  # the default bins (cpu_tiny's: medium)
    assert parse(text).calls[0].arguments == {"model": "answer-math-2"}
    with pytest.raises(ValueError, match="longer than sampling.max_tokens=20"):
        scripted_samples([(task, [call])], tools, tok, note=preference_note, max_tokens=20, **kw)


def test_note_weight_weighs_only_the_notes_tokens(restated):
    """sft.note_weight: the tokens inside each demonstrated call's think block weigh that much in the loss, the think
    tags, the call and the end of turn 1; samples without a note are unchanged, and a note the weighting cannot find
    is refused, naming the key, never left unweighted silently."""
    from orchestra.agent.prompt import preference_note
    from orchestra.data.demos import weight_notes

    task, tools, tok, kw, call = restated
    [plain] = scripted_samples([(task, [call])], tools, tok, note=preference_note, **kw)
    [weighted] = scripted_samples([(task, [call])], tools, tok, note=preference_note, note_weight=8.0, **kw)
    assert weighted.response_ids == plain.response_ids and set(plain.response_mask) == {1}
    heavy = tok.decode([t for t, m in zip(weighted.response_ids, weighted.response_mask, strict=True) if m == 8.0])
    assert heavy == "cost top, latency low"
    assert tok.decode(weighted.response_ids).startswith("<think>cost top, latency low</think>" + call)
    [bare] = scripted_samples([(task, [call])], tools, tok, note_weight=8.0, **kw)  # no note: nothing to weigh
    assert set(bare.response_mask) == {1}
    masked = dataclasses.replace(weighted, response_mask=[0.0] * len(weighted.response_mask))
    assert set(weight_notes([masked], tok, 8.0)[0].response_mask) == {0.0}  # out of the loss stays out
    with pytest.raises(ValueError, match="sft.note_weight=8: no demonstrated call holds a note"):
        scripted_samples([(task, [call])], tools, tok, note=lambda prompt: "[cost top] ", note_weight=8.0, **kw)


def test_preference_note_restates_the_priorities_and_the_router_line():
    from orchestra.agent.prompt import preference_note

    assert preference_note("q\n\nPriorities: cost top, latency medium, avoids answer-1.<|im_end|>") == \
        "<think>cost top, latency medium, avoids answer-1</think>"
    hinted = "q\n\nPriorities: cost minimal, latency none.\nRouter (odds high): answer answer-2.<|im_end|>"
    assert preference_note(hinted) == "<think>cost minimal, latency none; answer answer-2</think>"
    # numbers only (agent.preference_numbers without words): the note reads them into the bins' words
    levels = (0.056, 0.178, 0.56, 1.78)
    assert preference_note("Preference weights: accuracy 1, cost 2.<|im_end|>", levels) == "<think>cost top, latency none</think>"
    numbered = "q\n\nPreference weights: accuracy 1, cost 0.3, latency 0.07, tool:answer-1 -0.2.\nRouter (odds low): answer answer-4."
    assert preference_note(numbered, levels) == "<think>cost medium, latency low, avoids answer-1; answer answer-4</think>"
    assert preference_note("q\n\nno preference here") == ""
