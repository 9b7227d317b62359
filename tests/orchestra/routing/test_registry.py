"""The registry of routing policies (orchestra/routing/registry.py): it lists exactly the policies each surface
offers, and every reader resolves names through it: the held-out comparison (orchestra/routing/holdout.py), the
evaluation (cluster/evaluate.py policy_list, cluster/eval_policies.py run_routers), Serve (actors/serve/api.py
settings, actors/serve/wiring.py router_engine) and the warm start (cluster/teachers/expected_value.py, in
tests/cluster/test_router_pool.py). A policy registered here (one entry) reaches all of them with no other edit."""

from __future__ import annotations

import numpy as np
import pytest

from orchestra.eval.baselines import BASELINES
from orchestra.routing import registry
from orchestra.routing.estimator import Expected
from orchestra.routing.holdout import compare, fit_routers
from orchestra.types import Task
from tests.orchestra.routing.test_family_holdout import synthetic

MARKER = "always_first.json"


class AlwaysFirst:
    """A stand-in learned router: every task's route is the first plan's single call."""

    def script(self, task: Task) -> list[str]:
        return ['<tool_call>{"name": "answer", "arguments": {"model": "answer-1"}}</tool_call>']


def first_plan(_fitted, tasks, _X) -> Expected:
    n = len(tasks)
    return Expected(np.tile([0.9, 0.1], (n, 1)), np.tile([0.01, 0.001], (n, 1)), np.ones((n, 2)))


ALWAYS_FIRST = registry.RoutingPolicy(
    "always_first", "learned", "a test's router", ("eval", "serve", "holdout"), fit=lambda e: len(e.tasks),
    expected=first_plan, saved=lambda d: (d / MARKER).is_file(), load=lambda d, _embed: AlwaysFirst(),
    serve=lambda router, s: (lambda task: ("engine", router.script(task), s.eos_token_id, list(s.tools))))


@pytest.fixture
def with_always_first(monkeypatch):
    """The registry with ALWAYS_FIRST registered, restored afterwards."""
    monkeypatch.setattr(registry, "POLICIES", list(registry.POLICIES))
    registry.register(ALWAYS_FIRST)
    return ALWAYS_FIRST


def test_the_registry_lists_exactly_the_policies_of_each_surface():
    assert registry.names("eval") == ["orchestrator", "estimator", *BASELINES, "base"]
    assert registry.names("eval", "fixed") == list(BASELINES)
    assert [p.name for p in registry.among("eval", "fixed") if p.replay_only] == ["oracle"]
    assert registry.names("serve") == ["model", "estimator", "router"]
    assert registry.names("holdout") == ["estimator", "estimator_routing", "estimator_before", "family"]
    assert [p.name for p in registry.kept()] == ["estimator"]  # what a run's warm start fits and saves
    assert len({p.name for p in registry.POLICIES}) == len(registry.POLICIES)
    assert registry.get("router").saved is registry.get("estimator").saved  # router mode reads the estimator's files
    with pytest.raises(ValueError, match=r"unknown routing policy 'router' for eval; choose one of \['orchestrator'"):
        registry.get("router", "eval")


def test_register_refuses_a_taken_name_and_a_learned_policy_missing_its_hooks(monkeypatch):
    monkeypatch.setattr(registry, "POLICIES", list(registry.POLICIES))
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.RoutingPolicy("estimator", "learned", "", ("holdout",)))
    with pytest.raises(ValueError, match=r"needs \['load', 'saved', 'serve'\]"):
        registry.register(registry.RoutingPolicy("half", "learned", "", ("serve",)))
    with pytest.raises(ValueError, match="kind must be one of"):
        registry.register(registry.RoutingPolicy("odd", "magic", "", ("eval",)))


def test_a_registered_policy_joins_the_held_out_comparison(with_always_first):
    rec = synthetic(2, n=60)
    train, test = list(range(45)), list(range(45, 60))
    assert list(fit_routers(rec, train)) == [*registry.names("holdout")[:-1], "always_first"]
    assert fit_routers(rec, train)["always_first"] == 45  # fitted on the training rows
    figures, lines = compare(rec, train, test, cost_scale=0.01, latency_scale=10.0)
    assert "logloss_always_first" in figures and any("always_first accuracy" in line for line in lines)


def test_evaluation_finds_loads_and_lists_the_learned_policies_through_the_registry(with_always_first, tmp_path):
    from cluster.eval_policies import run_routers
    from cluster.evaluate import policy_list

    run = tmp_path / "run"
    (run / "checkpoints" / "step_1").mkdir(parents=True)
    (run / MARKER).write_text("{}")
    found = run_routers({"checkpoint": str(run / "checkpoints" / "step_1")})  # the checkpoint's run, found upwards
    assert list(found) == ["always_first"] and isinstance(found["always_first"], AlwaysFirst)
    assert list(run_routers({"estimator": str(run)})) == ["always_first"]
    with pytest.raises(SystemExit, match="no estimator router there"):
        run_routers({"estimator": str(tmp_path)})
    policies, routers = policy_list({}, found, {"orchestrator": object(), "base": object()}, replay=False)
    assert policies == ["orchestrator", "always_first", *[b for b in BASELINES if b != "oracle"], "base"]
    assert routers["always_first"](Task(id="t", problem="p", answer="")) == AlwaysFirst().script(None)
    policies, routers = policy_list({"estimator": "", "baselines": "random"}, found, {"base": object()}, replay=True)
    assert (policies, routers) == (["random", "base"], {})


def test_serve_accepts_and_builds_the_policies_the_registry_offers(with_always_first, tmp_path):
    from actors.serve.api import settings_from_dict
    from actors.serve.wiring import router_engine

    with pytest.raises(ValueError, match="policy must be model, estimator, router or always_first, got 'nope'"):
        settings_from_dict({"policy": "nope"})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / MARKER).write_text("{}")
    engine = router_engine(settings_from_dict({"policy": "always_first", "router": str(tmp_path / "run")}), object(),
                           [7], tools=["answer"])
    assert engine(Task(id="t", problem="p", answer="")) == ("engine", AlwaysFirst().script(None), 7, ["answer"])
    assert router_engine(settings_from_dict({"policy": "model"}), object(), [7]) is None
    with pytest.raises(ValueError, match="policy=always_first: no estimator router under"):
        router_engine(settings_from_dict({"policy": "always_first", "router": str(tmp_path / "other")}), None, [7])
