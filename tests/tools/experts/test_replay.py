"""ReplayExpert on the shared routing data: each model's recorded MMLU-Pro accuracy is reproduced exactly,
RouterArena tokens and $ are replayed as recorded, unknown questions are error results."""

from __future__ import annotations

import json
import zipfile

import pytest

from orchestra.config import ConfigError, ExpertConfig, ZooConfig, load_config
from orchestra.types import Task, ToolContext
from tools.experts.replay import load_replay
from tools.registry import build_experts, build_tools

# Accuracies stated in ../shared/data/SOURCES.md (3 decimals)
STATED = {"gemini-1.5-pro-002": 0.702, "gemini-1.5-flash-002": 0.641, "llama-3.1-70b": 0.628,
          "llama-3.1-8b": 0.442, "mixtral-8x7b": 0.419, "mistral-7b": 0.288}


@pytest.fixture(scope="module")
def zoo(shared_data):
    return load_config(["experiment=mmlu_pro_replay"]).zoo


@pytest.fixture(scope="module")
def experts(zoo):
    return build_experts(zoo)


def _raw_rows(path: str) -> list[dict]:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read(z.namelist()[0]))


async def test_recorded_accuracy_reproduced_exactly(experts):
    per_model_correct = {}
    for name, expert in experts.items():
        rows = _raw_rows(expert.path)
        truth = {str(r["question_id"]): r["pred"] == r["answer"] for r in rows}
        replayed = {}
        for qid in truth:
            reply = await expert.complete("", None, ToolContext(task=Task(id=f"mmlu-{qid}", problem="",
                                                                          answer="", meta={"question_id": qid})))
            assert reply.ok
            replayed[qid] = reply.meta["recorded_correct"]
        assert replayed == truth
        accuracy = sum(replayed.values()) / len(replayed)
        assert accuracy == sum(truth.values()) / len(rows)
        assert round(accuracy, 3) == STATED[name]
        per_model_correct[name] = replayed
    shared = set.intersection(*(set(v) for v in per_model_correct.values()))
    assert len(shared) == 12002  # SOURCES.md: all six files share 12,002 question ids
    # on the shared ids the ranking of models by accuracy is the stated one
    acc = {n: sum(v[q] for q in shared) / len(shared) for n, v in per_model_correct.items()}
    assert sorted(acc, key=acc.get, reverse=True) == sorted(STATED, key=STATED.get, reverse=True)


async def test_answer_tool_replays_text_answer_and_estimated_cost(zoo, experts):
    tools = build_tools(zoo, ["answer"])
    rows = {str(r["question_id"]): r for r in _raw_rows(experts["mistral-7b"].path)[:50]}
    for qid, row in rows.items():
        task = Task(id=qid, problem=row["question"], answer=row["answer"])  # question id from task.id
        result = await tools["answer"].call({"model": "answer-6"}, ToolContext(task=task))
        assert result.ok and result.meta["model"] == "mistral-7b"
        assert result.meta["answer"] == (row["pred"] or "")
        assert result.meta["recorded_correct"] == (row["pred"] == row["answer"])
        assert result.meta["estimated"] is True and result.cost_usd > 0
        assert result.tokens_out == len(row["generated_text"]) // 4
    schema = tools["answer"].schema(Task(id="x", problem="", answer=""))
    assert schema["function"]["parameters"]["properties"]["model"]["enum"] == [f"answer-{i}" for i in range(1, 7)]


async def test_unknown_question_is_an_error_result(zoo):
    tools = build_tools(zoo, ["answer"])
    task = Task(id="no-such-question", problem="?", answer="A")
    result = await tools["answer"].call({"model": "answer-1"}, ToolContext(task=task))
    assert not result.ok and "no recorded output" in result.error and "answer" not in result.meta


async def test_router_arena_tokens_and_cost_as_recorded(shared_data):
    path = shared_data / "routing" / "routerarena" / "gemini-2.0-flash-001.jsonl"
    zoo = ZooConfig(experts={"flash": ExpertConfig(kind="replay", model="gemini-2.0-flash-001",
                                                   replay_path=str(path))}, tiers={"answer-1": "flash"})
    expert = build_experts(zoo)["flash"]
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    total_cost = 0.0
    scores = []
    for row in rows:
        task = Task(id=row["global_index"], problem=row["question"], answer="")
        reply = await expert.complete("", None, ToolContext(task=task))
        ev = row["evaluation_result"]
        assert (reply.tokens_in, reply.tokens_out) == (row["token_usage"]["input_tokens"],
                                                       row["token_usage"]["output_tokens"])
        assert reply.cost_usd == ev["inference_cost"] and reply.meta["estimated"] is False
        assert reply.meta["recorded_score"] == ev["score"]
        total_cost += reply.cost_usd
        scores.append(reply.meta["recorded_score"])
    assert len(rows) == 809
    assert round(sum(scores) / len(scores), 3) == 0.690 and round(total_cost, 4) == 0.0384  # SOURCES.md


def test_parsed_once_and_missing_files_are_config_errors(experts):
    before = load_replay.cache_info().hits
    experts["gemini-1.5-pro-002"].records()
    experts["gemini-1.5-pro-002"].records()
    assert load_replay.cache_info().hits >= before + 2
    zoo = ZooConfig(experts={"x": ExpertConfig(kind="replay", model="gpt-5", replay_path="no/such/file.zip")},
                    tiers={})
    with pytest.raises(ConfigError, match="zoo.experts.x: replay_path"):
        build_experts(zoo)
