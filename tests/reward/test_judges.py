"""Outcome judges: normalised exact match, token F1, math-verify, multiple choice, the LLM judge against a
fake OpenAI-compatible server on 127.0.0.1, and the never-raise contract. Real gold answers from shared/data."""

from __future__ import annotations

import json
import random
import re
import zipfile

import pytest

from reward.judges import (
    Judgement,
    LLMJudge,
    extract_choice,
    judge,
    judge_for,
    normalize_answer,
    register_judge,
    token_f1,
)


def test_normalize_and_exact():
    assert normalize_answer("  The  Eiffel-Tower! ") == "eiffeltower"
    assert normalize_answer("An apple, a day") == "apple day"
    for answer, gold, ok in [("the Beatles.", "Beatles", True), ("BEATLES", ["Stones", "beatles"], True),
                             ("Rolling Stones", "Beatles", False), ("", "x", False)]:
        j = judge_sync("exact", answer, gold)
        assert j.correct is ok and j.score == float(ok) and j.judge == "exact"


def judge_sync(name, answer, gold, **kw) -> Judgement:
    import asyncio

    return asyncio.run(judge(name, answer, gold, **kw))


async def test_token_f1_by_hand():
    # pred {cat, sat} vs gold {cat, sat, on, mat}: precision 1, recall 1/2 -> F1 2/3
    assert token_f1("the cat sat", "cat sat on the mat") == pytest.approx(2 / 3)
    assert token_f1("mat", "mat") == 1.0 and token_f1("dog", "cat") == 0.0
    j = await judge("f1", "the cat sat", "cat sat on the mat", threshold=0.6)
    assert j.correct and j.score == pytest.approx(2 / 3)
    assert not (await judge("f1", "the cat sat", "cat sat on the mat", threshold=0.7)).correct


@pytest.mark.parametrize("answer,gold,ok", [
    ("\\frac{1}{2}", "0.5", True), ("0.5", "\\frac12", True), ("The answer is $\\boxed{\\frac{1}{2}}$", "0.5", True),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True), ("x = 3", "3", True), ("0.6", "0.5", False),
    ("no number here", "7", False),
])
async def test_math_equivalence(answer, gold, ok):
    assert (await judge("math", answer, gold)).correct is ok


async def test_math_on_real_math500_and_gsm8k(shared_data):
    rows = [json.loads(line) for line in (shared_data / "math/math500_test.jsonl").open()][:40]
    right = [(await judge("math", r["solution"], r["answer"])).correct for r in rows]
    assert sum(right) >= 38, [r["answer"] for r, ok in zip(rows, right, strict=True) if not ok]
    # a solution judged against the NEXT problem's answer is almost never right
    crossed = [(await judge("math", rows[(i + 1) % 40]["solution"], r["answer"])).correct for i, r in enumerate(rows)]
    assert sum(crossed) <= 4
    gsm = [json.loads(line) for line in (shared_data / "math/gsm8k_test.jsonl").open()][:20]
    for r in gsm:
        gold = r["answer"].split("####")[-1].strip().replace(",", "")
        assert (await judge("math", f"So the final answer is {gold}.", gold)).correct


@pytest.mark.parametrize("text,letter", [
    ("The answer is (C).", "C"), ("c", "C"), ("(B)", "B"), ("Answer: **D**", "D"), ("\\boxed{J}", "J"),
    ("A is wrong, B is wrong. The answer is (E)", "E"), ("I cannot tell.", None), ("", None),
])
def test_extract_choice(text, letter):
    assert extract_choice(text) == letter


async def test_choice_judge_and_real_mmlu_pro_outputs(shared_data):
    assert (await judge("choice", "The answer is (C)", "C")).correct
    assert not (await judge("choice", "The answer is (C)", "(D)")).correct
    path = shared_data / "routing/mmlu_pro/model_outputs_gemini-1.5-flash-002_5shots.zip"
    with zipfile.ZipFile(path) as z:
        rows = json.loads(z.read(z.namelist()[0]))[:1500]
    picked = [(extract_choice(r["model_outputs"]), r["pred"]) for r in rows]
    found = [(a, b) for a, b in picked if a is not None]
    # MMLU-Pro's own extractor agrees on nearly every output where a letter is stated (it takes the first
    # "answer is", we take the last); where none is stated (many refusals in engineering) it guesses
    assert len(found) >= 0.8 * len(rows)
    stated = [r for r in rows if re.search(r"The answer is \([A-J]\)", r["model_outputs"])]
    assert all(extract_choice(r["model_outputs"]) for r in stated)
    assert sum(a == b for a, b in found) >= 0.98 * len(found)


async def test_judges_never_raise():
    async def broken(answer, gold, question="", **_):
        raise RuntimeError("parser exploded")

    register_judge("broken_for_test", broken)
    j = await judge("broken_for_test", "x", "x")
    assert not j.correct and "parser exploded" in j.reason
    assert "unknown judge" in (await judge("nope", "x", "x")).reason
    assert (await judge("exact", None, "x")).reason == "no answer given"
    assert "no LLM judge" in (await judge("llm", "x", "y")).reason
    assert judge_for("math500", {"math500": "math", "default": "f1"}) == "math"
    assert judge_for("frames", {"math500": "math", "default": "f1"}) == "f1"
    assert judge_for("frames", {}) == "exact"
    assert judge_for("synthetic/arith", {"synthetic": "math", "default": "f1"}) == "math"
    assert judge_for("synthetic/arith", {"synthetic/arith": "choice", "synthetic": "math"}) == "choice"


async def test_recorded_judge_reads_the_replayed_verdict_of_the_answering_call():
    """`recorded` trusts the log's verdict for the model whose answer ended the episode, whatever the answer
    string; an episode without one (no answer call, or a non-replay expert) is wrong with the reason."""
    from orchestra.types import ToolRecord, ToolResult, Trajectory

    def traj(*metas):
        records = [ToolRecord(turn=i, name="answer", tool_id=f"answer-{i + 1}", arguments={},
                              result=ToolResult(text="", answer="whatever", meta=m)) for i, m in enumerate(metas)]
        return Trajectory(task_id="t", uid="t", answer="whatever", termination="answered", tool_records=records)

    right = await judge("recorded", "whatever", "gold", traj=traj({"recorded_correct": False},
                                                                    {"recorded_correct": True}))
    assert right.correct and "answer-2 was recorded right" in right.reason
    wrong = await judge("recorded", "gold", "gold", traj=traj({"recorded_correct": False}))
    assert not wrong.correct  # the string matches the gold, the log says the model was wrong: the log wins
    assert "needs a replay zoo" in (await judge("recorded", "x", "x", traj=traj({"simulated": True}))).reason
    assert "no answer call" in (await judge("recorded", "x", "x", traj=traj())).reason


# ---------------------------------------------------------------- LLM judge (fake server: conftest.py)
async def test_llm_judge_against_fake_server(fake_openai, monkeypatch):
    url, seen, server = fake_openai
    monkeypatch.setenv("ORCH_TEST_JUDGE_KEY", "sk-secret-123")
    llm = LLMJudge(url, "judge-model", api_key_env="ORCH_TEST_JUDGE_KEY", timeout_s=0.4, max_retries=0)
    question, gold = "What is the capital of France?", "Paris"
    j = await judge("llm", "It is the city of Paris, France.", gold, question, llm=llm)
    assert j.correct and j.judge == "llm" and "VERDICT: CORRECT" in j.reason
    sent = seen[-1]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sk-secret-123"
    assert sent["body"]["model"] == "judge-model" and sent["body"]["temperature"] == 0.0
    assert question in sent["body"]["messages"][-1]["content"] and gold in sent["body"]["messages"][-1]["content"]
    assert not (await judge("llm", "London", gold, question, llm=llm)).correct

    calls = len(seen)
    assert (await judge("llm", "paris", gold, question, llm=llm)).reason == "exact-match shortcut"
    assert not (await judge("llm", "   ", gold, question, llm=llm)).correct
    long = await judge("llm", "Paris " * 501, gold, question, llm=llm)
    assert not long.correct and "501 words" in long.reason
    assert len(seen) == calls  # none of these three reached the server

    for answer, why in [("boom", "judge call failed"), ("maybe slow", "judge call failed"),
                        ("Lyon", "no verdict")]:
        j = await judge("llm", answer, gold, question, llm=llm)
        assert not j.correct and why in j.reason and "sk-secret-123" not in j.reason
    await llm.close()


async def test_llm_judge_concurrent_calls(fake_openai):
    url, seen, server = fake_openai
    llm = LLMJudge(url, "judge-model", timeout_s=5, max_retries=0, max_concurrency=4)
    import asyncio

    answers = [random.Random(i).choice(["Paris!", "London"]) for i in range(12)]
    got = await asyncio.gather(*(judge("llm", a, "Paris", "Capital of France?", llm=llm) for a in answers))
    assert [g.correct for g in got] == [a == "Paris!" for a in answers]
    assert seen[0]["auth"] == "Bearer EMPTY"  # no key configured
    assert 2 <= server.max_in_flight <= 4  # concurrent, but never beyond max_concurrency
    await llm.close()
