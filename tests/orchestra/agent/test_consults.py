"""Reading what experts answer: `consult` shows an expert's extracted answer, `submit` ends with one already seen at
no cost, both prompt layouts render the answers, and the judges score a submitted answer as the consulted expert's
(the simulated zoo and the MMLU-Pro replay zoo)."""

from __future__ import annotations

import asyncio

import pytest

from orchestra.agent.consults import agree
from orchestra.agent.loop import AgentLoop
from orchestra.agent.prompt import Prompter
from orchestra.config import load_config
from orchestra.engine import Sampling
from orchestra.types import Task
from reward.judges import judge
from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
from tools.base import LocalToolClient
from tools.registry import build_tools

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def sim_tools():
    return build_tools(load_config([]).zoo, ["consult", "answer", "submit"])


def _task(i: int = 0, **kw) -> Task:
    base = dict(id=f"q{i}", problem="Which letter? (A) one (B) two (C) three", answer="B",
                meta={"family": "lookup", "difficulty": 3, "distractors": ["A", "C"]})
    return Task(**{**base, **kw})


def run(tools, script, task=None, prompter=None):
    engine = ScriptedEngine(TOK, script)
    loop = AgentLoop(engine, LocalToolClient(tools), prompter or Prompter(TOK), max_turns=4,
                     eos_token_ids=[TOK.eos_token_id])
    return asyncio.run(loop.run(task or _task(), Sampling(max_tokens=200), uid="u")), engine


def test_consult_shows_answers_and_submit_ends_with_one_at_no_cost(sim_tools):
    script = [call_text("consult", model="answer-2"), call_text("consult", model="answer-4"),
              call_text("submit", model="answer-2")]
    traj, engine = run(sim_tools, script)
    consults = traj.tool_records[:2]
    seen = [r.result.candidate for r in consults]
    assert traj.termination == "answered" and traj.answer == seen[0]
    assert traj.cost_usd == pytest.approx(sum(r.result.cost_usd for r in consults)) and traj.cost_usd > 0
    submit = traj.tool_records[2]
    assert (submit.name, submit.result.cost_usd, submit.result.meta["submitted_from_turn"]) == ("submit", 0.0, 0)
    assert submit.result.meta["sim_correct"] == consults[0].result.meta["sim_correct"]  # the consult's verdict
    assert traj.tool_counts == {"answer-2": 1, "answer-4": 1}  # submitting uses no tier
    third = TOK.decode(engine.prompts[2])
    verdict = "they agree" if agree(*seen) else "they differ"
    assert f"Expert answers ({verdict}):\nanswer-2: {seen[0]}\nanswer-4: {seen[1]}" in third
    assert "Expert answers:\nanswer-2: " in TOK.decode(engine.prompts[1])  # one answer: nothing to compare
    assert "Previous attempts" not in third  # the answers are not also listed as attempts
    assert all(r.result.answer is None for r in consults)  # a consult never ends the episode


def test_submitting_an_unseen_tier_is_an_observation_not_an_end(sim_tools):
    script = [call_text("submit", model="answer-1"), call_text("consult", model="answer-3"),
              call_text("submit", model="answer-3")]
    traj, engine = run(sim_tools, script)
    first = traj.tool_records[0].result
    assert not first.ok and "'answer-1' has not answered" in first.error and "consulted: none yet" in first.error
    assert "submit(answer-1) -> Error" in TOK.decode(engine.prompts[1])
    assert traj.termination == "answered" and traj.answer == traj.tool_records[1].result.candidate


def test_orchestrator8b_layout_shows_consulted_answers_as_its_attempts(sim_tools):
    prompter = Prompter(TOK, prompt_format="toolorchestra")
    script = [call_text("consult", model="answer-2"), call_text("consult", model="answer-3"),
              call_text("answer", model="answer-1")]
    traj, engine = run(sim_tools, script, prompter=prompter)
    third = TOK.decode(engine.prompts[2])
    a, b = (r.result for r in traj.tool_records[:2])
    assert f"Attempt1 answer by {a.meta['model']}: {a.candidate}" in third
    assert f"Attempt2 answer by {b.meta['model']}: {b.candidate}" in third
    assert traj.termination == "answered" and traj.tool_records[-1].name == "answer"


def _mmlu_question() -> tuple[str, dict]:
    from tools.experts.replay import load_replay, resolve_data_path

    pro = load_replay(str(resolve_data_path("routing/mmlu_pro/model_outputs_gemini-1.5-pro-002_5shots.zip")))
    flash = load_replay(str(resolve_data_path("routing/mmlu_pro/model_outputs_gemini-1.5-flash-002_5shots.zip")))
    qid = next(q for q, r in flash.items() if q in pro and r.pred and pro[q].pred and r.pred != pro[q].pred)
    return qid, {"pro": pro[qid], "flash": flash[qid]}


def test_replay_zoo_consults_real_recorded_answers_and_judges_a_submit_by_its_record():
    from tools.experts.replay import shared_data_dir

    if not (shared_data_dir() / "routing" / "mmlu_pro").is_dir():
        pytest.skip("the MMLU-Pro recordings are not in the shared data directory")
    cfg = load_config(["experiment=mmlu_pro_replay"])
    tools = build_tools(cfg.zoo, ["consult", "answer", "submit"])
    qid, rec = _mmlu_question()
    task = Task(id=f"mmlu-{qid}", problem="(question)", answer="Z", meta={"question_id": qid})
    script = [call_text("consult", model="answer-1"), call_text("consult", model="answer-2"),
              call_text("submit", model="answer-2")]
    traj, engine = run(tools, script, task=task)
    assert [r.result.candidate for r in traj.tool_records[:2]] == [rec["pro"].pred, rec["flash"].pred]
    assert f"answer-1: {rec['pro'].pred}\nanswer-2: {rec['flash'].pred}" in TOK.decode(engine.prompts[2])
    assert traj.answer == rec["flash"].pred
    verdict = asyncio.run(judge("recorded", traj.answer, task.answer, traj=traj))
    assert verdict.correct == rec["flash"].correct  # flash's recorded verdict, not pro's


def test_loaded_tasks_are_offered_consult_and_submit_where_the_zoo_has_them():
    """A task's catalogue names the orchestrator's tools; the client offers those its zoo has. The MMLU-Pro loader's
    tasks once named only search / enhance_reasoning / answer, so a replay zoo with consult never offered it."""
    from orchestra.data.synth.template import generate_tasks

    task = generate_tasks(1, seed=0).tasks[0]
    names = [s["function"]["name"] for s in LocalToolClient(build_tools(load_config([]).zoo, list(
        load_config([]).zoo.tools))).schemas(task)]
    assert {"consult", "submit", "answer"} <= set(names)
    replay = load_config(["experiment=mmlu_pro_replay"]).zoo
    offered = {n for n in ("answer", "consult", "submit") if n in task.tools and n in replay.tools}
    assert offered == {"answer", "consult", "submit"}
