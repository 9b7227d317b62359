"""Exploration on the simulated zoo, and the estimator router as a policy: saved, loaded, run by the evaluator
under every preference through the same agent loop and tools as the other policies."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import numpy as np
import pytest

from orchestra.agent.prompt import Prompter
from orchestra.data.synth.template import generate_tasks
from orchestra.eval.runner import Evaluator
from orchestra.preferences import PRESETS
from orchestra.routing.estimator import RouteEstimator, TaskFeatures
from orchestra.routing.explore import explore
from orchestra.routing.plans import Outcome, Plan, enumerate_plans
from orchestra.routing.router import EstimatorRouter, has_router
from orchestra.types import Task
from reward.score import episode_scorer
from tests.helpers.fakes import ByteTokenizer


def family_embed(texts: list[str]) -> np.ndarray:
    """A stand-in for MiniLM: the template families' surface forms as one-hot features."""
    kinds = ("Puzzle:", "Code:", "boxes of")
    return np.array([[k in t for k in kinds] + [not any(k in t for k in kinds)] for t in texts], dtype=float)


@pytest.fixture(scope="module")
def setup():
    from orchestra.config import load_config
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    zoo = load_config().zoo
    tasks = generate_tasks(16, 3, split="train", mapping=zoo.tiers).tasks
    tools = LocalToolClient(build_tools(dataclasses.replace(zoo, seed=zoo.seed), names=["answer"]))
    return zoo, tasks, tools


def test_exploration_plays_every_plan_on_every_task(setup):
    zoo, tasks, tools = setup
    tok = ByteTokenizer()
    plans = enumerate_plans(tools.schemas(tasks[0]))
    assert len(plans) >= 4 and all(len(p.calls) == 1 and p.calls[0][0] == "answer" for p in plans)
    outcomes = explore(tasks, plans, tools, tok, Prompter(tok), tok.eos_token_id, agent_kwargs={"max_turns": 2},
                       score=episode_scorer({"default": "exact"}, cost_scale=0.01, latency_scale=10.0))
    assert {(o.task_id, o.plan) for o in outcomes} == {(t.id, p.name) for t in tasks for p in plans}
    gpt5 = next(p.name for p in plans if zoo.tiers[p.name] == "gpt-5")
    cheap = next(p.name for p in plans if zoo.tiers[p.name] == "qwen2.5-math-7b")
    cost = {name: np.mean([o.cost_usd for o in outcomes if o.plan == name]) for name in (gpt5, cheap)}
    assert cost[gpt5] > 10 * cost[cheap] > 0  # real prices: the simulated experts are priced like the models


def test_router_follows_each_preference_and_survives_save_and_load(setup, tmp_path):
    zoo, tasks, tools = setup
    tok = ByteTokenizer()
    plans = enumerate_plans(tools.schemas(tasks[0]))
    outcomes = explore(tasks, plans, tools, tok, Prompter(tok), tok.eos_token_id, agent_kwargs={"max_turns": 2},
                       score=episode_scorer({"default": "exact"}, cost_scale=0.01, latency_scale=10.0))
    features = TaskFeatures(family_embed)
    est = RouteEstimator(plans).fit(features(tasks), [t.id for t in tasks], outcomes)
    EstimatorRouter(est, features, 0.01, 10.0).save(tmp_path)
    assert has_router(tmp_path) and not has_router(tmp_path / "router" / "x")
    router = EstimatorRouter.load(tmp_path, lambda _model_dir, _dtype: family_embed)

    prefs = {n: PRESETS[n] for n in ("balanced", "accuracy-first", "cost-first")}
    ev = Evaluator(tok, Prompter(tok), {0: tools}, tok.eos_token_id, routers={"estimator": router.script},
                   agent_kwargs={"max_turns": 2}, score=episode_scorer({"default": "exact"}))
    recs = asyncio.run(ev.run(tasks, ["estimator", "cheapest"], prefs, [0]))
    assert sum(r["policy"] == "estimator" for r in recs) == 3 * len(tasks)  # a router runs under every preset
    assert sum(r["policy"] == "cheapest" for r in recs) == len(tasks)
    spend = {n: sum(r["cost_usd"] for r in recs if r["policy"] == "estimator" and r["preference"] == n) for n in prefs}
    assert spend["accuracy-first"] > spend["balanced"] > spend["cost-first"]  # the choice moves with the weights
    for r in recs:
        if r["policy"] == "estimator":
            task = next(t for t in tasks if t.id == r["task_id"])
            assert r["tool_counts"] == router.plan(dataclasses.replace(task, pref=prefs[r["preference"]])).tool_counts()


def test_loading_a_missing_router_names_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="make train"):
        EstimatorRouter.load(tmp_path, lambda _model_dir, _dtype: family_embed)


def test_the_router_is_loaded_with_the_embedding_precision_it_was_fitted_with(tmp_path):
    plans = [Plan("a", (("answer", "answer-1"),)), Plan("b", (("answer", "answer-2"),))]
    tasks = [Task(id=f"t{i}", problem=f"q{i}", answer="", meta={"family": "math" if i % 2 else "qa"}) for i in range(8)]
    outcomes = [Outcome(t.id, p.name, (i + j) % 2 == 0, 0.01, 1.0) for i, t in enumerate(tasks)
                for j, p in enumerate(plans)]
    features = TaskFeatures(family_embed)
    est = RouteEstimator(plans, select=False).fit(features(tasks), [t.id for t in tasks], outcomes)
    asked = []
    EstimatorRouter(est, features, 0.01, 10.0, embed_dtype="bfloat16").save(tmp_path / "new")
    EstimatorRouter.load(tmp_path / "new", lambda model_dir, dtype: asked.append(dtype) or family_embed)
    spec = tmp_path / "new" / "router" / "estimator.json"
    old = json.loads(spec.read_text())
    del old["features"]["dtype"]  # a router saved before the precision was recorded: fitted in float32
    spec.write_text(json.dumps(old))
    loaded = EstimatorRouter.load(tmp_path / "new", lambda model_dir, dtype: asked.append(dtype) or family_embed)
    assert asked == ["bfloat16", "float32"] and loaded.embed_dtype == "float32"


def test_a_router_reading_text_statistics_rebuilds_them_when_loaded(tmp_path):
    plans = [Plan("a", (("answer", "answer-1"),)), Plan("b", (("answer", "answer-2"),))]
    tasks = [Task(id=f"t{i}", problem="word " * (3 + i), answer="") for i in range(30)]
    outcomes = [Outcome(t.id, p.name, (len(t.problem) < 60) == (j == 0), 0.01 / (j + 1), 1.0)
                for t in tasks for j, p in enumerate(plans)]
    features = TaskFeatures(family_embed, text_stats=True)
    est = RouteEstimator(plans).fit(features(tasks), [t.id for t in tasks], outcomes, n_stats=features.n_stats)
    EstimatorRouter(est, features, 0.01, 10.0).save(tmp_path)
    loaded = EstimatorRouter.load(tmp_path, lambda _model_dir, _dtype: family_embed)
    assert loaded.features.text_stats and loaded.features.n_stats == features.n_stats
    Xq = features(tasks[:5])
    assert loaded.estimator.expected(loaded.features(tasks[:5])).p_correct == pytest.approx(
        est.expected(Xq).p_correct)
    spec = tmp_path / "router" / "estimator.json"
    old = json.loads(spec.read_text())
    del old["features"]["text_stats"]  # a router saved before the statistics existed reads none
    spec.write_text(json.dumps(old))
    assert not EstimatorRouter.load(tmp_path, lambda _model_dir, _dtype: family_embed).features.text_stats
