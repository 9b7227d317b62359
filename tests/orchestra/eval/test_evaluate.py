"""Evaluation harness (orchestra/eval/: runner, baselines, stats, report) and plots (orchestra/eval/plots.py) on a tiny simulated run."""

import asyncio
import dataclasses
import json
import math
import re
from types import SimpleNamespace

import pytest

from orchestra.agent.prompt import Prompter
from orchestra.data.synth.template import generate_tasks
from orchestra.eval.baselines import baseline_script
from orchestra.eval.plots import plot_training
from orchestra.eval.report import quality_figures, write_report
from orchestra.eval.runner import Evaluator
from orchestra.eval.stats import frontier, mean_ci, on_frontier, summarize
from orchestra.preferences import PRESETS
from reward.score import episode_scorer
from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
from tools.registry import tier_costs


def test_mean_ci_by_hand():
    m, h = mean_ci([1.0, 0.0, 1.0, 1.0])
    # 0/1 values: the Wilson interval of 3/4, (0.3006, 0.9544) (tests/orchestra/eval/test_stats_intervals.py
    # computes it by hand); mean_ci gives its half-width (the normal approximation's 0.49 reached 1.24)
    assert m == 0.75 and math.isclose(h, (0.95441 - 0.30064) / 2, abs_tol=1e-4)
    assert mean_ci([3.0]) == (3.0, 0.0)
    assert math.isnan(mean_ci([])[0])


def test_summarize_by_hand():
    recs = [{"policy": "p", "preference": "balanced", "seed": s, "task_id": f"t{i}", "correct": c, "reward": r,
             "cost_usd": usd, "latency_s": lat, "tool_counts": tc, "termination": term}
            for s, i, c, r, usd, lat, tc, term in [
                (0, 0, True, 1.0, 0.01, 2.0, {"answer-1": 1}, "answered"),
                (0, 1, False, 0.0, 0.02, 4.0, {"answer-2": 1, "search-1": 1}, "answered"),
                (1, 0, True, 0.5, 0.03, 6.0, {"answer-1": 1}, "answered"),
                (1, 1, True, 0.5, 0.04, 8.0, {}, "max_turns")]]
    (row,) = summarize(recs)
    assert row["n"] == 4 and row["seeds"] == [0, 1]
    assert row["accuracy"] == 0.75 and math.isclose(row["accuracy_lo"], 0.30064, abs_tol=1e-4)  # Wilson
    assert math.isclose(row["accuracy_hi"], 0.95441, abs_tol=1e-4)
    assert math.isclose(row["accuracy_ci"], (row["accuracy_hi"] - row["accuracy_lo"]) / 2)
    # cost in cents 1,2,3,4 and latency 2,4,6,8: bootstrap intervals of the mean, inside the values' range
    assert math.isclose(row["cost_cents"], 2.5) and 1.0 <= row["cost_cents_lo"] < 2.5 < row["cost_cents_hi"] <= 4.0
    assert math.isclose(row["latency_s"], 5.0) and 2.0 <= row["latency_s_lo"] < 5.0 < row["latency_s_hi"] <= 8.0
    assert summarize(recs) == [row]  # seeded: the same records give the same intervals
    assert row["tool_mix"] == {"answer-1": 0.5, "answer-2": 0.25, "search-1": 0.25}
    assert row["answered"] == 0.75


def test_frontier_and_quality_figures():
    pts = [(1.0, 0.5), (2.0, 0.4), (4.0, 0.9), (0.5, 0.2)]
    assert frontier(pts) == [(0.5, 0.2), (1.0, 0.5), (4.0, 0.9)]
    assert on_frontier((2.5, 0.7), pts)  # the line from (1, .5) to (4, .9) is at 0.7 for cost 2.5
    assert not on_frontier((2.5, 0.69), pts)
    assert on_frontier((0.1, 0.05), pts) and not on_frontier((0.1, 0.03), pts)  # 0.2 * 0.1 / 0.5 = 0.04
    assert not on_frontier((9.0, 0.8), pts)
    rows = [{"policy": "strongest", "preference": "balanced", "accuracy": 0.9, "cost_cents": 4.0},
            {"policy": "cheapest", "preference": "balanced", "accuracy": 0.2, "cost_cents": 0.5},
            {"policy": "orchestrator", "preference": "accuracy-first", "accuracy": 0.9, "cost_cents": 3.0},
            {"policy": "orchestrator", "preference": "balanced", "accuracy": 0.88, "cost_cents": 1.0},
            {"policy": "orchestrator", "preference": "cost-first", "accuracy": 0.6, "cost_cents": 0.6}]
    q = quality_figures(rows)
    assert math.isclose(q["acc_gap"], 2.0) and math.isclose(q["cost_ratio"], 0.25)
    assert q["on_frontier"] == 1.0 and q["monotone"] == 1.0 and math.isclose(q["pref_spread"], 5.0)
    idle = [r if r["policy"] != "orchestrator" else {**r, "accuracy": 0.0, "cost_cents": 0.0} for r in rows]
    assert quality_figures(idle) == {"acc_gap": 90.0, "cost_ratio": 0.0, "on_frontier": 0.0, "monotone": 0.0,
                                     "pref_spread": 0.0, "acc_first_gap": 90.0}
    # the same $ under two presets is not a fall: monotone is strict
    flat = [r if r["preference"] != "balanced" or r["policy"] != "orchestrator" else {**r, "cost_cents": 3.0}
            for r in rows]
    assert quality_figures(flat)["monotone"] == 0.0
    # the oracle reads the recorded answers: a reference point, not part of the fixed routers' frontier
    with_oracle = [*rows, {"policy": "oracle", "preference": "balanced", "accuracy": 1.0, "cost_cents": 0.5}]
    assert quality_figures(with_oracle)["on_frontier"] == 1.0


def test_baseline_scripts():
    task = generate_tasks(4, 0, mapping={"answer-1": "a", "answer-2": "b"}).tasks[2]  # a Puzzle
    schemas = [{"function": {"name": "answer", "parameters": {"properties": {"model": {
        "enum": ["answer-1", "answer-2", "answer-3"]}}}}}]
    costs = {"answer-1": 3.0, "answer-2": 2.0, "answer-3": 1.0}
    assert "answer-1" in baseline_script("strongest", task, schemas, costs, 0)[0]
    assert "answer-3" in baseline_script("cheapest", task, schemas, costs, 0)[0]
    assert baseline_script("random", task, schemas, costs, 5) == baseline_script("random", task, schemas, costs, 5)
    assert "answer-1" in baseline_script("heuristic", task, schemas, costs, 0)[0]  # "Puzzle:" -> strongest tier
    task.meta["question_id"] = "q1"
    task.model_mapping = {"answer-1": "big", "answer-2": "mid", "answer-3": "small"}
    rec = {"big": True, "mid": True, "small": False}
    experts = {n: SimpleNamespace(records=lambda ok=ok: {"q1": SimpleNamespace(correct=ok)}) for n, ok in rec.items()}
    assert "answer-2" in baseline_script("oracle", task, schemas, costs, 0, experts)[0]  # cheapest right one
    with pytest.raises(ValueError, match="replay"):
        baseline_script("oracle", task, schemas, costs, 0, {})
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline_script("smartest", task, schemas, costs, 0)


@pytest.fixture(scope="module")
def sim_setup():
    from orchestra.config import load_config
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    zoo = load_config().zoo
    tasks = generate_tasks(4, 1, split="heldout", mapping=zoo.tiers).tasks
    clients = {s: LocalToolClient(build_tools(dataclasses.replace(zoo, seed=zoo.seed + s), names=["answer"]))
               for s in (0, 1)}
    return zoo, tasks, clients


def _orchestrator(tok):
    """A stand-in learned policy: reads the cost weight from its prompt and picks a cheaper tier as it rises."""
    def reply(prompt: str) -> str:
        cost = float(re.search(r"cost (-?[\d.]+)", prompt).group(1))
        return call_text("answer", model="answer-1" if cost < 0.1 else "answer-2" if cost < 1 else "answer-math-2")
    return ScriptedEngine(tok, reply)


def test_tiny_run_report_and_resume(sim_setup, tmp_path):
    zoo, tasks, clients = sim_setup
    tok = ByteTokenizer()
    results = tmp_path / "episodes.jsonl"

    def evaluator():
        return Evaluator(tok, Prompter(tok), clients, tok.eos_token_id, engines={"orchestrator": _orchestrator(tok)},
                         tier_cost=tier_costs(zoo, zoo.tiers), agent_kwargs={"max_turns": 2}, results_path=results,
                         score=episode_scorer({"default": "exact"}))

    prefs = {n: PRESETS[n] for n in ("balanced", "accuracy-first", "cost-first")}
    policies = ["orchestrator", "strongest", "cheapest", "random", "heuristic"]
    recs = asyncio.run(evaluator().run(tasks, policies, prefs, [0, 1]))
    assert len(recs) == (3 + 4) * 2 * len(tasks)  # orchestrator under 3 presets, baselines under the first
    assert all(r["termination"] == "answered" for r in recs)
    lines = results.read_text().splitlines()
    assert len(lines) == len(recs)
    # resume: a second run does nothing new; dropping episodes re-runs exactly those
    again = asyncio.run(evaluator().run(tasks, policies, prefs, [0, 1]))
    assert len(results.read_text().splitlines()) == len(lines) and len(again) == len(recs)
    results.write_text("\n".join(lines[:-5]) + "\n")
    asyncio.run(evaluator().run(tasks, policies, prefs, [0, 1]))
    assert len(results.read_text().splitlines()) == len(lines)

    report = write_report(recs, tmp_path / "out", meta={"seeds": [0, 1]})
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    assert saved["meta"]["seeds"] == [0, 1]
    rows = {(r["policy"], r["preference"]): r for r in saved["rows"]}
    strong = rows[("strongest", "balanced")]
    by_hand = [100 * r["cost_usd"] for r in recs if r["policy"] == "strongest"]
    assert math.isclose(strong["cost_cents"], sum(by_hand) / len(by_hand))
    assert strong["tool_mix"] == {"answer-1": 1.0}
    assert rows[("cheapest", "balanced")]["cost_cents"] < strong["cost_cents"]
    assert report["quality"]["monotone"] == 1.0  # the stand-in's $ falls as the cost weight rises
    assert (tmp_path / "out" / "pareto.png").stat().st_size > 1000
    assert (tmp_path / "out" / "tool_mix.png").stat().st_size > 1000
    md = (tmp_path / "out" / "report.md").read_text()
    # each figure with its own interval, as computed (Wilson / bootstrap: not symmetric, so not ±)
    acc = f"{strong['accuracy']:.3f} [{strong['accuracy_lo']:.3f}, {strong['accuracy_hi']:.3f}]"
    assert f"| strongest | balanced | {strong['n']} | {acc} |" in md and "±" not in md


def test_plot_training(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": s, "kind": "train", "reward": 0.1 * s, "accuracy": 0.5, "cost_usd": 0.01,
             "reward_actor": {"tool_mix": {"answer-1": 0.5, "answer-2": 0.4, "146-2": 0.1}}} for s in range(1, 4)]
    rows.append({"step": 3, "kind": "eval", "heldout": {"score": 0.3, "accuracy": 0.6, "cost_usd": 0.02}})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{torn")
    written = plot_training(path, tmp_path / "plots")
    assert [p.name for p in written] == ["training.png", "tool_mix_steps.png"]
    assert all(p.stat().st_size > 1000 for p in written)


def test_each_seeded_episode_draws_its_own_stream():
    """One sampling seed per (evaluation seed, task): reusing the evaluation seed for every task would give all
    episodes the same random numbers (one quantile of the policy, not samples of it)."""
    from orchestra.eval.runner import task_seed

    seeds = {task_seed(s, f"t{i}") for s in range(2) for i in range(50)}
    assert len(seeds) == 100 and all(0 <= x < 2**31 for x in seeds)
    assert task_seed(1, "t3") == task_seed(1, "t3")  # stable across processes (no salted hash)


def test_scripted_plans_run_on_every_task(sim_setup):
    """Evaluator(scripts=...): a named fixed plan is played on each task, as the family-router bound runs them."""
    zoo, tasks, clients = sim_setup
    tok = ByteTokenizer()
    plans = {"math-7b": [call_text("answer", model="answer-math-2")], "gpt-5": [call_text("answer", model="answer-1")]}
    ev = Evaluator(tok, Prompter(tok), clients, tok.eos_token_id, scripts=plans, agent_kwargs={"max_turns": 2},
                   score=episode_scorer({"default": "exact"}))
    recs = asyncio.run(ev.run(tasks, list(plans), {"balanced": None}, [0]))
    assert len(recs) == 2 * len(tasks) and all(r["termination"] == "answered" for r in recs)
    for r in recs:
        assert r["tool_counts"] == {"answer-math-2" if r["policy"] == "math-7b" else "answer-1": 1}
    cost = {p: sum(r["cost_usd"] for r in recs if r["policy"] == p) for p in plans}
    assert cost["gpt-5"] > 10 * cost["math-7b"] > 0


def test_make_eval_evaluates_a_checkpoint_under_the_config_it_was_trained_with(tmp_path):
    """A run's saved config.yaml comes first (its prompt rendering, route hints, tiers), the command line's
    overrides on top; a named experiment or a checkpoint without a config leaves the overrides alone."""
    from cluster.evaluate import adopt_run_config
    from orchestra.config import load_config
    from orchestra.config.load import to_yaml

    run = tmp_path / "run"
    (run / "checkpoints" / "step_000001").mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(load_config(["experiment=cpu_tiny", "agent.route_hints=true"])))
    ckpt = str(run / "checkpoints" / "step_000001")
    adopted = adopt_run_config({"checkpoint": ckpt}, ["eval.n_tasks=3"])
    assert adopted == [f"experiment={run / 'config.yaml'}", "eval.n_tasks=3"]
    cfg = load_config(adopted)
    assert cfg.agent.route_hints and cfg.eval.n_tasks == 3 and cfg.agent.number_format == "level"
    assert adopt_run_config({"checkpoint": ckpt}, ["experiment=cpu_tiny"]) == ["experiment=cpu_tiny"]
    assert adopt_run_config({"checkpoint": str(tmp_path / "elsewhere")}, []) == []
    assert adopt_run_config({}, ["a=1"]) == ["a=1"]
