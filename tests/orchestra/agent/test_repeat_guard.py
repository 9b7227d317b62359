"""The agent loop's repeat guard: a repeated call is not run again, the answer tool is forced next (the policy
still writes the tier), the skip is recorded and counted; off, the loop behaves as before (training's default)."""

from __future__ import annotations

import asyncio

import pytest

from orchestra.agent.loop import AgentLoop, episode_samples, forced_answer_prefix
from orchestra.agent.prompt import Prompter
from orchestra.config import load_config
from orchestra.engine import Sampling
from tests.helpers.fakes import ByteTokenizer, FakeTool, ScriptedEngine, call_text, make_task
from tools.base import LocalToolClient

TOK = ByteTokenizer()
SAMPLING = Sampling(max_tokens=200, temperature=1.0)
REASON = call_text("enhance_reasoning", model="reasoner-1")
ANSWER_SCHEMA = {"type": "object", "properties": {"model": {"type": "string"}}, "required": ["model"]}


def toolset():
    return {"enhance_reasoning": FakeTool("enhance_reasoning", 0.01, 1.0, reply="391", code_output="391"),
            "answer": FakeTool("answer", 0.02, 2.0, reply="391", answers=True, parameters=ANSWER_SCHEMA)}


def looping_policy(prompt: str) -> str:
    """A stand-in for the served policy that called enhance_reasoning until max_turns: it repeats the same call,
    and, where its reply has been opened as an answer call, writes the tier it would pick."""
    if prompt.endswith('"model": "'):
        return 'answer-4"}}</tool_call>'
    return REASON


def run(mode="reprompt", guard=True, script=looping_policy, **kw):
    engine = ScriptedEngine(TOK, script)
    loop = AgentLoop(engine, LocalToolClient(toolset()), Prompter(TOK), context_mode=mode,
                     eos_token_ids=[TOK.eos_token_id], repeat_guard=guard, **kw)
    events = []
    traj = asyncio.run(loop.run(make_task(2), SAMPLING, uid="g1", on_step=lambda k, p: events.append(k)))
    return traj, engine, events


@pytest.mark.parametrize("mode", ["reprompt", "transcript"])
def test_a_repeated_call_is_not_run_and_the_answer_tool_is_forced(mode):
    traj, engine, events = run(mode)
    assert traj.termination == "answered" and traj.answer == "391" and len(traj.turns) == 3
    names = [(r.name, r.tool_id) for r in traj.tool_records]
    assert names == [("enhance_reasoning", "reasoner-1"), ("enhance_reasoning", "reasoner-1"), ("answer", "answer-4")]
    skipped = traj.tool_records[1].result
    assert not skipped.ok and skipped.meta["repeat_of_turn"] == 0 and "not run again" in skipped.error
    assert skipped.cost_usd == 0.0 and skipped.latency_s == 0.0
    assert traj.cost_usd == pytest.approx(0.03)  # the repeat was not paid for
    assert traj.meta["repeats_skipped"] == 1
    assert traj.tool_counts == {"reasoner-1": 1, "answer-4": 1}  # a skipped repeat uses no tool
    # the policy picked the tier; the loop only opened the call
    forced = TOK.decode(engine.prompts[2])
    assert forced.endswith(forced_answer_prefix([{"function": {"name": "answer", "parameters": ANSWER_SCHEMA}}]))
    assert traj.turns[2].text.startswith("<tool_call>") and traj.turns[2].format_ok
    # a streaming client sees the skip as one call and one observation, as it sees every trace entry
    assert events.count("tool_call") == events.count("observation") == 3


def test_forced_opening_stays_out_of_the_policys_own_tokens():
    traj, _, _ = run("transcript")
    (sample,) = episode_samples(traj)
    model_tokens = [t for t, m in zip(sample.response_ids, sample.response_mask) if m]
    assert model_tokens == [t for turn in traj.turns for t in turn.response_ids]
    masked = TOK.decode([t for t, m in zip(sample.response_ids, sample.response_mask) if not m])
    assert '{"name": "answer"' in masked and "not run again" in masked
    reprompt, _, _ = run("reprompt")
    last = episode_samples(reprompt)[-1]
    assert TOK.decode(last.prompt_ids).endswith('"model": "') and TOK.decode(last.response_ids).startswith("answer-4")


def test_the_forced_opening_stops_inside_the_tier_so_only_answer_tiers_can_follow():
    tiered = {"type": "object", "properties": {"model": {"type": "string", "enum": ["answer-1", "answer-4"]}}}
    schema = [{"type": "function", "function": {"name": "answer", "parameters": tiered}}]
    assert forced_answer_prefix(schema).endswith('{"model": "answer-')
    one = {"type": "object", "properties": {"model": {"type": "string", "enum": ["answer-2"]}}}
    assert forced_answer_prefix([{"function": {"name": "answer", "parameters": one}}]).endswith('"answer-2')
    assert forced_answer_prefix([{"function": {"name": "answer", "parameters": {}}}]).endswith('"arguments": {')
    assert forced_answer_prefix([{"function": {"name": "search", "parameters": tiered}}]) == ""

    def policy(prompt: str) -> str:  # left at the quote, this policy would write a search tier (as one did)
        return '4"}}</tool_call>' if prompt.endswith('"model": "answer-') else REASON

    tools = toolset()
    tools["answer"] = FakeTool("answer", 0.02, 2.0, reply="391", answers=True, parameters=tiered)
    loop = AgentLoop(ScriptedEngine(TOK, policy), LocalToolClient(tools), Prompter(TOK),
                     eos_token_ids=[TOK.eos_token_id], repeat_guard=True)
    traj = asyncio.run(loop.run(make_task(2), SAMPLING))
    assert traj.termination == "answered" and traj.tool_records[-1].tool_id == "answer-4"


def test_off_the_loop_runs_repeats_until_max_turns():
    traj, _, _ = run(guard=False)
    assert traj.termination == "max_turns" and traj.answer is None
    assert [r.result.ok for r in traj.tool_records] == [True] * 4 and "repeats_skipped" not in traj.meta


def test_a_different_argument_is_not_a_repeat_and_answer_calls_may_repeat():
    script = [call_text("enhance_reasoning", model="reasoner-1"), call_text("enhance_reasoning", model="reasoner-2"),
              call_text("answer", model="nope"), call_text("answer", model="nope")]
    tools = toolset()
    tools["answer"] = FakeTool("answer", fail=True, parameters=ANSWER_SCHEMA)  # fails: the policy may retry it
    engine = ScriptedEngine(TOK, script)
    loop = AgentLoop(engine, LocalToolClient(tools), Prompter(TOK), eos_token_ids=[TOK.eos_token_id], repeat_guard=True)
    traj = asyncio.run(loop.run(make_task(2), SAMPLING))
    assert [r.name for r in traj.tool_records] == ["enhance_reasoning", "enhance_reasoning", "answer", "answer"]
    assert all("repeat_of_turn" not in r.result.meta for r in traj.tool_records)


def test_repeat_on_the_last_turn_ends_at_max_turns_without_a_forced_turn():
    traj, engine, _ = run(max_turns=2)
    assert traj.termination == "max_turns" and len(traj.turns) == 2 == engine.calls
    assert traj.meta["repeats_skipped"] == 1


def test_without_an_answer_tool_the_observation_asks_for_the_answer():
    tools = {"enhance_reasoning": toolset()["enhance_reasoning"]}
    engine = ScriptedEngine(TOK, [REASON, REASON, "<answer>391</answer>"])
    loop = AgentLoop(engine, LocalToolClient(tools), Prompter(TOK), answer_mode="text",
                     eos_token_ids=[TOK.eos_token_id], repeat_guard=True)
    traj = asyncio.run(loop.run(make_task(2), SAMPLING))
    assert traj.termination == "answered" and traj.answer == "391"
    assert "give the final answer now" in traj.tool_records[1].result.error
    assert not TOK.decode(engine.prompts[2]).endswith('"model": "')  # nothing forced: no answer tool to open


def test_config_default_is_off_for_training_and_serving_turns_it_on():
    from pathlib import Path

    import yaml

    assert load_config().agent.repeat_guard is False
    serve = yaml.safe_load((Path(__file__).resolve().parents[3] / "conf" / "serve.yaml").read_text())
    overrides = serve["applications"][0]["args"]["overrides"]
    assert load_config(["experiment=cpu_tiny", *overrides]).agent.repeat_guard is True
    loop = AgentLoop.from_config(load_config(["agent.repeat_guard=true"]).agent, ScriptedEngine(TOK, [REASON]),
                                 LocalToolClient(toolset()), Prompter(TOK))
    assert loop.repeat_guard is True


def test_the_demo_shows_a_skipped_repeat_as_one():
    from cluster.demo import _turn_cell

    traj, _, _ = run()
    rec = traj.tool_records[1]
    cell = _turn_cell({"tool": rec.name, "tier": rec.tool_id, "error": rec.result.error, "cost_usd": 0.0,
                       "latency_s": 0.0})
    assert cell == ["enhance_reasoning reasoner-1", "a repeat of an earlier call: not run again, $0"]
