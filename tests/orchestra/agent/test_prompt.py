"""Prompt rendering against golden files (regenerate with UPDATE_GOLDEN=1), truncation budgets, preferences."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestra.agent.prompt import Prompter, preference_text
from tests.helpers.fakes import ByteTokenizer, FakeTool, make_task

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
TOK = ByteTokenizer()
SCHEMAS = [FakeTool("search", 0.01, 1.0).schema(), FakeTool("answer", 0.02, 2.0).schema()]


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text()


def test_reprompt_golden():
    p = Prompter(TOK, doc_chars=60, code_chars=40, attempt_chars=80)
    task = make_task(3, pref={"accuracy": 1.0, "cost": 0.5, "tool:answer-1": -0.25})
    msgs = [p.system(task), p.reprompt_user(task, ["Doc one about apples.", "Doc two about pears is longer than that."],
                                            ["print(6) -> 6"], ["turn 1: format error: no tool call found"])]
    text = p.render(msgs, SCHEMAS)
    check_golden("prompt_reprompt.txt", text)
    assert TOK.decode(p.encode(msgs, SCHEMAS)) == text


def test_transcript_golden():
    p = Prompter(TOK)
    task = make_task(3)
    msgs = p.first_messages(task) + [
        {"role": "assistant", "content": '<tool_call>{"name": "search", "arguments": {"model": "search-1"}}</tool_call>'},
        {"role": "tool", "content": "three documents"}]
    check_golden("prompt_transcript.txt", p.render(msgs, SCHEMAS))


def test_truncation_keeps_newest_within_budget():
    p = Prompter(TOK, doc_chars=50)
    docs = [f"document number {i} " + "x" * 20 for i in range(10)]
    user = p.reprompt_user(make_task(0), docs, [], [])["content"]
    body = user.split("Documents:\n", 1)[1]
    assert "document number 9" in body and "document number 0" not in body
    assert "older documents omitted" in body
    assert len(body) < 50 + 120  # budget plus labels and the omission note


def test_preference_text_is_stated():
    assert "cost 0.5" in preference_text({"accuracy": 1.0, "cost": 0.5})
    assert "accuracy first" in preference_text({})
    assert "Priorities" not in preference_text({"accuracy": 1.0, "cost": 0.5})  # words only when asked


def test_preference_words_give_each_swept_cost_weight_its_own_word():
    """The cost weights a user tries (0.05 .. 2 with accuracy 1) read differently; the presets' words differ;
    tool likes and dislikes are named; weights are relative to accuracy's."""
    from orchestra.agent.prompt import level, preference_words
    from orchestra.preferences import PRESETS

    words = [level(c, 1.0) for c in (0.05, 0.2, 0.5, 1.0, 2.0)]
    assert words == ["minimal", "low", "medium", "high", "top"] and level(0.0, 1.0) == "none"
    assert level(0.5, 0.5) == level(1.0, 1.0)  # the ratio counts, not the raw weight
    assert preference_words(PRESETS["accuracy-first"]) == "Priorities: cost minimal, latency none."
    assert preference_words(PRESETS["cost-first"]) == "Priorities: cost top, latency low."
    assert preference_words({"accuracy": 1, "cost": 0.5, "tool:answer-1": -0.3, "tool:search-1": 0.2}) == (
        "Priorities: cost medium, latency none, avoids answer-1, likes search-1.")
    text = preference_text(PRESETS["balanced"], words=True)
    assert text.startswith("Preference weights: accuracy 1, cost 0.5, latency 0.2.") and text.endswith(
        "Priorities: cost medium, latency low.")


def test_prompter_renders_the_words_when_configured():
    task = make_task()
    task.pref = {"accuracy": 1.0, "cost": 2.0}
    plain = Prompter(TOK).reprompt_user(task, [], [], [])["content"]
    worded = Prompter(TOK, preference_words=True).reprompt_user(task, [], [], [])["content"]
    assert worded == plain + " Priorities: cost top, latency none." and "Priorities" not in plain


def test_cached_system_prefix_gives_the_same_ids_as_one_piece():
    from orchestra.policy.models import load_tokenizer

    for tok in (TOK, load_tokenizer("tiny")):
        p = Prompter(tok)
        for i in range(3):
            task = make_task(i, pref={"accuracy": 1.0, "cost": 0.1 * i})
            msgs = [p.system(task), p.reprompt_user(task, [f"doc {i}"], [], [f"attempt {i}"])]
            whole = list(tok.encode(p.render(msgs, SCHEMAS), add_special_tokens=False))
            assert p.encode(msgs, SCHEMAS) == whole  # first call fills the cache
            assert p.encode(msgs, SCHEMAS) == whole  # second call uses it
        assert len(p._prefix_cache) == 1  # the preference is in the user turn: one system prefix for all


def test_tool_catalogue_brief_keeps_names_and_first_sentence_none_drops_it():
    """agent.tool_catalogue: a route hint's tier id should be the only one in the prompt (docs/quality.md)."""
    from orchestra.agent.prompt import catalogue

    schemas = [{"type": "function", "function": {
        "name": "answer", "description": "Answer: an expert answers. Tiers: answer-1 $1/$2 ~3s; answer-2 $0.1/$0.2 ~1s.",
        "parameters": {"type": "object", "properties": {"model": {"type": "string", "enum": ["answer-1", "answer-2"]}}}}}]
    brief = catalogue(schemas, "brief")
    assert brief[0]["function"]["description"] == "Answer: an expert answers."
    assert brief[0]["function"]["parameters"] == schemas[0]["function"]["parameters"]
    assert "Tiers" in schemas[0]["function"]["description"]  # the caller's schemas are not modified
    assert catalogue(schemas, "full") is schemas and catalogue(schemas, "none") is None
    task = make_task(3)
    msgs = Prompter(TOK).first_messages(task)
    full, short, bare = (Prompter(TOK, tool_catalogue=m).render(msgs, schemas) for m in ("full", "brief", "none"))
    assert "answer-1" in full and "answer-1" not in short and "- answer(model): Answer: an expert answers." in short
    assert "<tools>" not in bare and "answer(" not in bare
    ids = Prompter(TOK, tool_catalogue="brief").encode(msgs, schemas)
    assert TOK.decode(ids) == short
    with pytest.raises(ValueError, match="tool_catalogue"):
        Prompter(TOK, tool_catalogue="short")


def test_tool_catalogue_is_checked_by_name():
    from orchestra.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="agent.tool_catalogue"):
        load_config(["agent.tool_catalogue=short"])
    assert load_config(["agent.tool_catalogue=none"]).agent.prompter_kwargs()["tool_catalogue"] == "none"


def test_weights_per_unit_of_accuracy_in_scientific_notation_read_back():
    """agent.number_format=sci: each weight over accuracy's, two significant digits, one character a token of the
    tiny tokenizer; the note a restating policy writes reads them into the bins' words (issue 69)."""
    from orchestra.agent.prompt import parse_weights, preference_note, sci

    assert [sci(x) for x in (0.03, 0.0347, 0.1, 3.0, 12.5, -0.3, 0.0)] == \
        ["3.0e-2", "3.5e-2", "1.0e-1", "3.0e+0", "1.2e+1", "-3.0e-1", "0"]
    text = preference_text({"accuracy": 0.5, "cost": 0.15, "latency": 0.0, "tool:answer-1": -0.1}, number_format="sci")
    assert text == "Preference weights per unit of accuracy: cost 3.0e-1, latency 0, tool:answer-1 -2.0e-1."
    assert parse_weights(text + "<|im_end|>") == {"accuracy": 1.0, "cost": 0.3, "latency": 0.0, "tool:answer-1": -0.2}
    levels = (0.056, 0.178, 0.56, 1.78)
    assert preference_note(f"q\n\n{text}<|im_end|>", levels) == "<think>cost medium, latency none, avoids answer-1</think>"
