"""`sft.teacher: expected_value` (orchestra/routing/): every plan is played once on `router.explore_tasks` training
tasks and on `router.extra_tasks` router-only ones (exploration); the learned routing policies a run keeps
(orchestra/routing/registry.py `kept`: the estimator router) are fitted on those outcomes and saved in
`<run_dir>/router/` (policies of their own for evaluation and serving); and each (explored training task, preference
vector) is demonstrated with the plan a cross-fitted estimator rates best in expectation, under each of `sft.vectors`
(plus `sft.vectors_sampled` sampled vectors per task)."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cluster import launch
from cluster.teachers import Teaching, note
from orchestra.data.demos import label_repeats, scripted_samples
from orchestra.engine import eos_token_ids
from orchestra.routing.cascade import script_of
from orchestra.types import Task


def demonstrations(teaching: Teaching) -> tuple[list[Any], dict[str, Any]]:
    """Exploration -> the run's learned routers (saved) -> cross-fitted expected-value labels -> their episodes as
    training samples; and a report (label mix per preset, timings)."""
    from orchestra.agent.prompt import Prompter, preference_words
    from orchestra.routing import registry
    from orchestra.routing.cascade import as_plan, cascade_outcomes, frontier_cascades
    from orchestra.routing.estimator import Expected, TaskFeatures
    from orchestra.routing.explore import explore
    from orchestra.routing.hints import attach
    from orchestra.routing.plans import ADAPTIVE_TOOLS, enumerate_plans
    from orchestra.routing.teacher import cross_fitted, teacher_labels
    from reward.score import episode_scorer
    from tools.retrieval.dense import embed_texts

    c, r, rc = teaching.cfg, teaching.cfg.reward, teaching.cfg.router
    tools, tok, train = teaching.tools, teaching.tokenizer, teaching.tasks
    bars, console = teaching.bars, teaching.console
    run_dir = Path(c.run_dir).expanduser().resolve()
    n = rc.explore_tasks or len(train)
    tasks = random.Random(f"explore:{c.seed}").sample(train, min(n, len(train)))
    pool = router_pool(c, run_dir)  # router.extra_tasks: explored and fitted on, never labelled
    explored = tasks + pool
    plans = enumerate_plans(tools.schemas(tasks[0]))
    eos = eos_token_ids(tok)
    t0 = time.perf_counter()
    bar = bars.add("explore", len(explored) * len(plans))
    outcomes = explore(explored, plans, tools, tok, Prompter(tok, **launch.prompter_kwargs(c)), eos[0],
                       agent_kwargs={**c.agent.loop_kwargs(), "eos_token_ids": eos},
                       score=episode_scorer(dict(r.judges), cost_scale=r.cost_scale, latency_scale=r.latency_scale,
                                            price_in=c.model.price_in_per_mtok, price_out=c.model.price_out_per_mtok),
                       results_path=run_dir / "router" / "explore.jsonl",
                       on_episode=lambda _rec: bars.advance(bar))
    bars.remove(bar)
    explore_s = time.perf_counter() - t0
    played, cascades = len(outcomes), []  # exploration episodes; the adaptive plans' outcomes are computed, not played
    names = {s.get("function", s).get("name") for s in tools.schemas(tasks[0])}
    if ADAPTIVE_TOOLS[0] in names and ADAPTIVE_TOOLS[1] in names and rc.cascades:
        # adaptive plans: outcomes from the one-shot ones (a consult returns what that answer call returned)
        cascades = frontier_cascades(outcomes, rc.cascades)
        outcomes = outcomes + cascade_outcomes(outcomes, cascades)
        plans = plans + [as_plan(k) for k in cascades]
        console.print(f"  adaptive plans ({len(cascades)}, on the explored tasks' frontier): "
                      + (", ".join(k.name for k in cascades) or "none"))
    features = TaskFeatures(embed_texts(c.zoo.retriever.model_dir, rc.embed_dtype), rc.meta_keys,
                            text_stats=rc.text_stats).fit_vocab(explored)
    X, ids = features(explored), [t.id for t in explored]
    # the learned routers a run keeps, fitted on the exploration as the run's router.* settings say
    fitted = {p.name: p.fit(registry.Explored(explored, X, plans, outcomes, features.n_meta, features.n_stats, c.seed,
                                              rc.C, rc.alpha, rc.select_by)) for p in registry.kept()}
    estimator = fitted["estimator"]  # the teacher's and the route hints' own
    console.print(f"  estimator router: chose {estimator.selection.get('chosen', estimator.model['kind'])} by "
                  f"{estimator.folds}-fold cross-validation ({rc.select_by})"
                  + (f"; {estimator.selection['rule']}" if estimator.selection.get("rule") else ""))
    keeping = registry.Keeping(features, r.cost_scale, r.latency_scale, model_dir=c.zoo.retriever.model_dir,
                               embed_dtype=rc.embed_dtype)
    for name, model in fitted.items():
        registry.get(name).save(model, keeping, run_dir)
    expected = cross_fitted(X, ids, outcomes, plans, folds=rc.folds, seed=c.seed, C=rc.C, alpha=rc.alpha,
                            n_meta=features.n_meta, select_by=rc.select_by, n_stats=features.n_stats)
    m = len(tasks)  # the training tasks' rows come first; the pool's rows only served the fits
    expected = Expected(expected.p_correct[:m], expected.cost_usd[:m], expected.latency_s[:m])
    if c.agent.route_hints:  # the prompt's router line (orchestra/routing/hints.py), on the trainer's own tasks
        attach(tasks, expected, plans, r.cost_scale, r.latency_scale)  # cross-fitted, as the labels
        labelled = {t.id for t in tasks}
        rest = [t for t in train if t.id not in labelled]
        if rest:
            attach(rest, estimator.expected(features(rest)), plans, r.cost_scale, r.latency_scale)
    labels = teacher_labels(tasks, expected, plans, c.sft.vectors_sampled, c.seed, r.cost_scale, r.latency_scale,
                            fixed=c.sft.vectors, sample_cost=c.sft.sample_cost, sample_latency=c.sft.sample_latency,
                            latency_zero=c.sft.sample_latency_zero)
    mix: dict[str, Counter] = {}
    per_task = len(c.sft.vectors) + c.sft.vectors_sampled
    for i, lab in enumerate(labels):  # each task's labels: the fixed vectors in order, then the sampled ones
        k = i % per_task
        if k < len(c.sft.vectors):
            mix.setdefault(c.sft.vectors[k], Counter())[lab.plan.name] += 1
    for name, counts in mix.items():
        top = ", ".join(f"{p} {v / len(tasks):.0%}" for p, v in counts.most_common(3))
        console.print(f"  teacher, {name}: {top}")
    repeats = label_repeats([lab.plan.name for lab in labels], c.sft.label_balance)
    if c.sft.pref_balance:  # and rare priorities (their bin words, shown or noted), so every bin is read, not the presets'
        words = [preference_words(lab.task.pref, c.agent.preference_levels, c.agent.latency_words) for lab in labels]
        repeats = [a * b for a, b in zip(repeats, label_repeats(words, c.sft.pref_balance), strict=True)]
    samples = scripted_samples([(lab.task, script_of(lab.plan)) for lab in labels], tools, tok,
                               launch.prompter_kwargs(c), c.agent.loop_kwargs(), eos, c.sampling.max_tokens,
                               repeats=repeats, note=note(c), note_weight=c.sft.note_weight)
    if c.sft.label_balance or c.sft.pref_balance:
        rare = {lab.plan.name: k for lab, k in zip(labels, repeats, strict=True) if k > 1}
        console.print(f"  teacher: rare labels repeated (sft.label_balance {c.sft.label_balance:g}, sft.pref_balance "
                      f"{c.sft.pref_balance:g}): {len(repeats)} demonstrations enter an epoch {sum(repeats)} times; by "
                      "plan, at most " + (", ".join(f"{p} x{k}" for p, k in sorted(rare.items())) or "none"))
    console.print(f"  teacher: {played} exploration episodes ({len(tasks)} tasks"
                  + (f" + {len(pool)} router-only (router.extra_tasks)" if pool else "")
                  + f" x {len(plans) - len(cascades)} plans, {len(cascades)} adaptive ones computed from them) in "
                  f"{explore_s:.0f}s; {len(labels)} expected-value labels -> {len(samples)} samples; estimator "
                  f"router saved in {run_dir / 'router'}")
    return samples, {"explore_episodes": played, "adaptive_plans": [k.name for k in cascades], "explore_s": explore_s,
                     "router_extra_tasks": len(pool), "teacher_labels": len(labels), "sft_repeated": sum(repeats) - len(repeats),
                     "teacher_mix": {k: dict(v) for k, v in mix.items()}}


def router_pool(cfg: Any, run_dir: Path) -> list[Task]:
    """`router.extra_tasks` tasks (orchestra/data/sources.build_router_pool), kept in <run_dir>/data/router_pool.jsonl
    so a resumed run explores the same ones."""
    from orchestra.config import task_tiers
    from orchestra.data.sources import build_router_pool
    from orchestra.data.tasks import load_tasks, save_tasks

    n = cfg.router.extra_tasks
    path = run_dir / "data" / "router_pool.jsonl"
    if not n:
        return []
    if path.is_file():
        return load_tasks(path)
    pool = build_router_pool(cfg.data, n, task_tiers(cfg))
    save_tasks(pool, path)
    return pool
