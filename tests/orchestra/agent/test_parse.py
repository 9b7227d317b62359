"""Parser: valid calls, answers and every kind of garbage; property tests show it never raises."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestra.agent.parse import parse


def test_single_call_with_think_block():
    p = parse('<think>route to math</think><tool_call>{"name": "answer", "arguments": {"model": "answer-1"}}'
              '</tool_call><|im_end|>')
    assert p.ok and len(p.calls) == 1
    assert p.calls[0].name == "answer" and p.calls[0].arguments == {"model": "answer-1"}
    assert p.calls[0].tool_id == "answer-1"


def test_arguments_as_json_string_and_multiple_calls():
    text = ('<tool_call>{"name": "search", "arguments": "{\\"model\\": \\"search-2\\"}"}</tool_call>'
            '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>')
    p = parse(text)
    assert [c.name for c in p.calls] == ["search", "calculator"]
    assert p.calls[0].arguments == {"model": "search-2"} and p.calls[1].tool_id == "calculator"


def test_unclosed_call_at_end_of_generation_still_parses():
    p = parse('<tool_call>{"name": "answer", "arguments": {"model": "answer-2"}}')
    assert p.ok and p.calls[0].arguments["model"] == "answer-2"


def test_errors_are_messages_for_the_model():
    assert "invalid JSON" in parse("<tool_call>{name: answer}</tool_call>").error
    assert "needs a string 'name'" in parse('<tool_call>{"arguments": {}}</tool_call>').error
    assert "must be a JSON object" in parse('<tool_call>{"name": "a", "arguments": [1]}</tool_call>').error
    assert "JSON object" in parse("<tool_call>[1, 2]</tool_call>").error
    assert "empty" in parse("<tool_call></tool_call>").error
    assert "without <tool_call>" in parse('{"name": "a"}</tool_call>').error
    err = parse("I think the answer is 4").error
    assert "no tool call" in err and "I think the answer is 4" in err


def test_text_mode_answers():
    assert parse("The answer is 4.", answer_mode="text").answer == "The answer is 4."
    assert parse("<think>hmm</think><answer>42</answer>", answer_mode="text").answer == "42"
    assert parse("   ", answer_mode="text").error


def test_one_bad_block_does_not_hide_a_good_one():
    p = parse('<tool_call>{oops</tool_call><tool_call>{"name": "answer", "arguments": {}}</tool_call>')
    assert p.ok and [c.name for c in p.calls] == ["answer"]


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_never_raises_on_arbitrary_text(text):
    for mode in ("tool", "text"):
        p = parse(text, answer_mode=mode)
        assert (p.error is None) == (bool(p.calls) or p.answer is not None)


_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                          max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(name=st.one_of(st.text(max_size=10), st.integers(), st.none()), args=_json_values,
       cut=st.integers(min_value=0, max_value=80), noise=st.sampled_from(["", "}", "{", '"', "]", "<tool_call>"]))
def test_never_raises_on_near_valid_json(name, args, cut, noise):
    body = json.dumps({"name": name, "arguments": args})
    body = body[: len(body) - cut % (len(body) + 1)] + noise
    p = parse(f"<tool_call>{body}</tool_call>")
    if p.ok:
        call = p.calls[0]
        assert isinstance(call.name, str) and isinstance(call.arguments, dict)
    else:
        assert isinstance(p.error, str) and p.error
