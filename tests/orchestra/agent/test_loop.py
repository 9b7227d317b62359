"""Agent loop with the scripted engine: both context modes, masks, budgets, termination reasons, bad calls."""

from __future__ import annotations

import asyncio

import pytest

from orchestra.agent.loop import AgentLoop, episode_samples
from orchestra.agent.prompt import Prompter
from orchestra.engine import Sampling
from tests.helpers.fakes import ByteTokenizer, FakeTool, ScriptedEngine, call_text, make_task
from tools.base import LocalToolClient

TOK = ByteTokenizer()
SAMPLING = Sampling(max_tokens=200, temperature=1.0)


def tools(**extra):
    base = {"search": FakeTool("search", 0.01, 1.0, reply="found", documents=["Paris is the capital of France"]),
            "answer": FakeTool("answer", 0.02, 2.0, reply="4", answers=True),
            "calculator": FakeTool("calculator", 0.0, 0.1, reply="= 4",
                                   parameters={"type": "object", "properties": {"expression": {"type": "string"}},
                                               "required": ["expression"], "additionalProperties": False})}
    base.update(extra)
    return base


def run(script, mode="reprompt", toolset=None, task=None, **kw):
    engine = ScriptedEngine(TOK, script)
    loop = AgentLoop(engine, LocalToolClient(toolset or tools()), Prompter(TOK), context_mode=mode,
                     eos_token_ids=[TOK.eos_token_id], **kw)
    traj = asyncio.run(loop.run(task or make_task(2), SAMPLING, uid="g1"))
    return traj, engine


SEARCH, ANSWER = call_text("search", model="search-1", query="q"), call_text("answer", model="answer-1")


@pytest.mark.parametrize("mode", ["reprompt", "transcript"])
def test_answered_episode_accounts_cost_latency_and_tool_counts(mode):
    traj, _ = run([SEARCH, ANSWER], mode)
    assert traj.termination == "answered" and traj.terminated and not traj.truncated
    assert traj.answer == "4" and traj.uid == "g1"
    assert traj.cost_usd == pytest.approx(0.03) and traj.latency_s == pytest.approx(3.0)
    assert traj.tool_counts == {"search-1": 1, "answer-1": 1}
    assert [r.tool_id for r in traj.tool_records] == ["search-1", "answer-1"]


def test_reprompt_rerenders_documents_and_gives_one_sample_per_turn():
    traj, engine = run(["garbage", SEARCH, ANSWER])
    assert [t.format_ok for t in traj.turns] == [False, True, True]
    last_prompt = TOK.decode(engine.prompts[-1])
    assert "Documents:\n[Document 1] Paris is the capital of France" in last_prompt
    assert "format error: no tool call found" in last_prompt  # the model reads its parse error
    samples = episode_samples(traj)
    assert len(samples) == 3
    for s, t in zip(samples, traj.turns):
        assert s.prompt_ids == t.prompt_ids and s.response_mask == [1] * len(t.response_ids)


def test_transcript_keeps_token_ids_and_masks_tool_tokens():
    traj, engine = run(["garbage", SEARCH, ANSWER], "transcript")
    t0, t1, t2 = traj.turns
    # token in, token out: each prompt extends the previous prompt + the model's own response ids exactly
    assert t1.prompt_ids[: len(t0.prompt_ids) + len(t0.response_ids)] == t0.prompt_ids + t0.response_ids
    assert t2.prompt_ids[: len(t1.prompt_ids) + len(t1.response_ids)] == t1.prompt_ids + t1.response_ids
    (sample,) = episode_samples(traj)
    assert sample.prompt_ids == t0.prompt_ids
    assert len(sample.response_ids) == len(sample.response_mask) == len(sample.logprobs)
    model_tokens = [tok for tok, m in zip(sample.response_ids, sample.response_mask) if m]
    assert model_tokens == t0.response_ids + t1.response_ids + t2.response_ids
    tool_text = TOK.decode([tok for tok, m in zip(sample.response_ids, sample.response_mask) if not m])
    assert "<tool_response>" in tool_text and "found" in tool_text and "Format error" in tool_text
    # the rendered transcript equals what the chat template gives for the same conversation
    assert TOK.decode(t2.prompt_ids).endswith("<|im_start|>assistant\n")


def test_transcript_after_length_cut_closes_the_turn():
    long = "x" * 300
    traj, engine = run([long, ANSWER], "transcript")
    assert traj.turns[0].finish_reason == "length"
    text = TOK.decode(traj.turns[1].prompt_ids)
    assert "x" * 50 + "<|im_end|>\n<|im_start|>user\n<tool_response>" in text


def test_max_turns_truncates():
    traj, engine = run([SEARCH], max_turns=3)
    assert traj.termination == "max_turns" and traj.truncated and len(traj.turns) == 3 and traj.answer is None


def test_usd_budget_refuses_a_call_before_it_is_made():
    answer = FakeTool("answer", 0.02, 2.0, reply="4", answers=True)
    traj, _ = run([SEARCH, ANSWER], toolset=tools(answer=answer), budget_usd=0.025)
    assert traj.termination == "budget" and traj.truncated
    assert traj.cost_usd == pytest.approx(0.01) and traj.cost_usd <= 0.025
    assert answer.calls == []  # refused, not made
    assert traj.tool_records[-1].result.meta["budget_refused"]


def test_seconds_and_turn_budgets():
    traj, _ = run([SEARCH, SEARCH, ANSWER], budget_seconds=1.5)
    assert traj.termination == "budget" and len(traj.turns) == 2
    traj, _ = run([SEARCH, SEARCH, ANSWER], budget_turns=2)
    assert traj.termination == "max_turns" and len(traj.turns) == 2


def test_per_call_budget_overrides_loop_default():
    engine = ScriptedEngine(TOK, [SEARCH, ANSWER])
    loop = AgentLoop(engine, LocalToolClient(tools()), Prompter(TOK), budget_usd=1.0, eos_token_ids=[TOK.eos_token_id])
    traj = asyncio.run(loop.run(make_task(1), SAMPLING, budget_usd=0.0))
    assert traj.termination == "budget" and traj.cost_usd == 0.0


def test_unknown_tool_and_bad_arguments_become_observations():
    script = [call_text("teleport", x=1), call_text("calculator", expr="1+1"), call_text("calculator", expression=3),
              ANSWER]
    traj, engine = run(script, max_turns=5)
    assert traj.termination == "answered"
    errors = [r.result.error for r in traj.tool_records[:3]]
    assert "unknown tool 'teleport'" in errors[0] and "answer, calculator, search" in errors[0]
    assert "missing required field" in errors[1] or "unexpected field" in errors[1]
    assert "field 'expression'" in errors[2]
    assert "unknown tool" in TOK.decode(engine.prompts[1])


def test_tool_exception_is_returned_not_raised():
    traj, _ = run([SEARCH, ANSWER], toolset=tools(search=FakeTool("search", fail=True)))
    assert traj.termination == "answered"
    assert "fake failure" in traj.tool_records[0].result.error


def test_engine_failure_ends_only_that_episode():
    class Broken:
        async def generate(self, prompt_ids, sampling):
            raise RuntimeError("engine died")

    loop = AgentLoop(Broken(), LocalToolClient(tools()), Prompter(TOK))
    traj = asyncio.run(loop.run(make_task(0), SAMPLING))
    assert traj.termination == "error" and "engine died" in traj.error


def test_text_answer_mode_and_step_events():
    events = []
    engine = ScriptedEngine(TOK, [SEARCH, "Paris"])
    loop = AgentLoop(engine, LocalToolClient(tools()), Prompter(TOK), answer_mode="text")
    traj = asyncio.run(loop.run(make_task(0), SAMPLING, on_step=lambda k, p: events.append(k)))
    assert traj.answer == "Paris" and traj.termination == "answered"
    assert events == ["tool_call", "observation", "answer"]


def test_concurrent_episodes_share_one_loop():
    engine = ScriptedEngine(TOK, lambda prompt: ANSWER if "Documents" in prompt else SEARCH)
    loop = AgentLoop(engine, LocalToolClient(tools()), Prompter(TOK))

    async def many():
        return await asyncio.gather(*(loop.run(make_task(i), SAMPLING, uid=f"u{i}") for i in range(16)))

    trajs = asyncio.run(many())
    assert all(t.termination == "answered" and len(t.turns) == 2 for t in trajs)
    assert len({t.episode_id for t in trajs}) == 16
