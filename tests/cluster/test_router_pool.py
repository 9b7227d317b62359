"""router.extra_tasks: more tasks of a loaded set, after its held-out and training ones in the split's order,
explored only to fit the estimator router (orchestra/data/sources.build_router_pool,
cluster/teachers/expected_value.py). On the shipped routing log, in process (no Ray): the pool is disjoint from both
splits and the same for the same seed; the router is fitted on training + pool; the teacher labels and hints
training tasks only."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from cluster.routing_log import main as convert
from orchestra.config import ConfigError, load_config, task_tiers
from orchestra.data.sources import build_router_pool, build_task_set

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "routing_log.csv"  # 24 questions


@pytest.fixture(scope="module")
def preset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("log") / "ex"
    assert convert([str(EXAMPLE), "--out", str(out)]) == 0
    return out / "experiment.yaml"


def test_the_pool_is_the_next_tasks_of_the_split_and_never_a_held_out_one(preset):
    cfg = load_config([f"experiment={preset}", "data.n_train=12", "data.n_heldout=4"])
    tiers = task_tiers(cfg)
    train, held, _ = build_task_set(cfg.data, tiers)
    pool = build_router_pool(cfg.data, 8, tiers)
    ids = [t.id for t in pool]
    assert len(ids) == 8 and not set(ids) & {t.id for t in train + held}
    assert [t.id for t in build_router_pool(cfg.data, 8, tiers)] == ids  # the same for the same seed
    wider = load_config([f"experiment={preset}", "data.n_train=20", "data.n_heldout=4"])
    assert [t.id for t in build_task_set(wider.data, tiers)[0]] == [t.id for t in train] + ids  # the split's order
    assert all(t.model_mapping == tiers for t in pool)
    with pytest.raises(ValueError, match=r"router.extra_tasks=9: .* only 8 tasks after the 4 held-out and 12"):
        build_router_pool(cfg.data, 9, tiers)
    with pytest.raises(ValueError, match="router.extra_tasks=3: the source 'template' generates"):
        build_router_pool(load_config([]).data, 3)


def test_only_the_expected_value_teacher_takes_extra_tasks(preset):
    with pytest.raises(ConfigError, match="router.extra_tasks"):
        load_config([f"experiment={preset}", "router.extra_tasks=4", "sft.teacher=random", "agent.route_hints=false",
                     "sft.restate_preference=false"])
    with pytest.raises(ConfigError, match="router.extra_tasks"):
        load_config([f"experiment={preset}", "router.extra_tasks=-1"])


def test_the_router_is_fitted_on_the_pool_and_the_teacher_labels_training_tasks_only(preset, tmp_path, monkeypatch):
    from cluster.progress import Bars
    from cluster.teachers import Teaching
    from cluster.teachers.expected_value import demonstrations
    from orchestra.agent.hints import HINT_KEY
    from orchestra.data.tasks import load_tasks
    from orchestra.policy.models import load_tokenizer
    from orchestra.routing import registry
    from orchestra.routing.estimator import RouteEstimator
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    # every learned policy the registry says runs keep is fitted on the exploration and saved: one registered here too
    kept: dict[str, object] = {}
    monkeypatch.setattr(registry, "POLICIES", list(registry.POLICIES))
    registry.register(registry.RoutingPolicy(
        "kept_too", "learned", "a test's router", ("holdout",), fit=lambda e: e, expected=lambda *a: None,
        save=lambda explored, keeping, run_dir: kept.update(explored=explored, keeping=keeping, run_dir=run_dir)))
    run = tmp_path / "run"
    cfg = load_config([f"experiment={preset}", "data.n_train=12", "data.n_heldout=4", "router.extra_tasks=8",
                       "router.folds=2", f"run_dir={run}"])
    train, _, _ = build_task_set(cfg.data, task_tiers(cfg))
    tok = load_tokenizer(cfg.model.name, tiny=cfg.model.tiny, cache_dir=cfg.model.cache_dir,
                         chat_template=cfg.model.chat_template)
    console = Console(file=io.StringIO(), width=200)
    with Bars(console) as bars:
        samples, report = demonstrations(Teaching(cfg, LocalToolClient(build_tools(cfg.zoo, list(cfg.zoo.tools))),
                                                  tok, train, bars, console))
    pool = load_tasks(run / "data" / "router_pool.jsonl")
    assert [t.id for t in pool] == [t.id for t in build_router_pool(cfg.data, 8, task_tiers(cfg))]
    rows = [json.loads(line) for line in (run / "router" / "explore.jsonl").read_text().splitlines()]
    plans = {r["policy"] for r in rows}
    assert {r["task_id"] for r in rows} == {t.id for t in train + pool}  # every plan on training + pool tasks
    assert report["explore_episodes"] == len(rows) == 20 * len(plans) and report["router_extra_tasks"] == 8
    estimator, _ = RouteEstimator.load(run / "router")
    assert estimator.n_train == 20
    per_task = len(cfg.sft.vectors) + cfg.sft.vectors_sampled
    assert report["teacher_labels"] == 12 * per_task  # labels: training tasks only
    # one sample per label, rare labels repeated (sft.label_balance)
    assert len(samples) == report["teacher_labels"] + report["sft_repeated"]
    assert (report["sft_repeated"] > 0) == (cfg.sft.label_balance > 0)
    assert all(HINT_KEY in t.meta for t in train) and not any(HINT_KEY in t.meta for t in pool)
    assert "12 tasks + 8 router-only (router.extra_tasks)" in console.file.getvalue()
    explored = kept["explored"]
    assert kept["run_dir"] == run.resolve() and len(explored.tasks) == 20 and explored.C == cfg.router.C
    assert {t.id for t in explored.tasks} == {t.id for t in train + pool} and len(explored.outcomes) >= len(rows)
    assert kept["keeping"].embed_dtype == cfg.router.embed_dtype
