"""The SFT warm start of a training run: demonstrations played through the run's own tool servers, then
`sft.steps` learner updates on them with a decaying learning rate, after which the learner's frozen reference
becomes the warm-started policy (so KL anchors RL to it). Where the demonstrations' routes come from
(`sft.teacher`):

- `random` (orchestra/data/demos.py): random tool and tier choices, teaching the format only; with
  `sft.candidates` > 1 each is the best of k random episodes under the held-out score's own rubric (scalar, the
  task's preference), in hindsight; with `sft.paired` every task is demonstrated under each vector of the
  preference pairing (cluster/rollouts.paired_tasks).
- `expected_value` (orchestra/routing/): every plan is played once on `router.explore_tasks` training tasks
  and on `router.extra_tasks` router-only ones (exploration), the estimator router is fitted on those outcomes
  and saved in `<run_dir>/router/` (a policy of its own for evaluation and serving), and each (explored training
  task, preference vector) is demonstrated with the plan a cross-fitted estimator rates best in expectation,
  under each of `sft.vectors` (plus `sft.vectors_sampled` sampled vectors per task).
- `cascade`: every task demonstrates `sft.cascade`'s two consults, then escalates with probability
  `sft.escalate_share` whatever the experts answered (a warm start that consults but does not read what they say:
  RL's positive control must learn to escalate on disagreement, bench/rl_control.py).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from actors.tool_client import RayToolClient
from cluster import launch
from cluster.rollouts import paired_tasks
from orchestra.data.demos import Script, demo_samples, label_repeats, scripted_samples, sft_batches, sft_lr
from orchestra.engine import eos_token_ids
from orchestra.policy.models import config_tokenizer
from orchestra.routing.cascade import script_of
from orchestra.types import Task
from reward.score import score_episode


def warm_start(cfg: Any, learner: Any, tool_handles: dict[str, Any], tasks: list[Task], bars: Any,
               console: Any, check: Callable[[int], dict[str, float]] | None = None) -> dict[str, Any]:
    """Demonstrations, then the SFT steps (`sft_loop`; `check`: the trainer's check of the policy on training
    tasks, used where the config asks for one: `sft_checks`)."""
    c = cfg
    tok = config_tokenizer(c.model)
    # Demonstrations go through the run's own tool servers: no second retriever index in the driver.
    tools = RayToolClient(tool_handles, timeout_s=c.zoo.server.timeout_s)
    r = c.reward

    async def scorer(traj, task):  # used when sft.candidates > 1: the held-out score's own rubric
        return (await score_episode(traj, task, dict(r.judges), cost_scale=r.cost_scale,
                                    latency_scale=r.latency_scale, price_in=c.model.price_in_per_mtok,
                                    price_out=c.model.price_out_per_mtok))[3]

    report: dict[str, Any] = {}
    if c.sft.teacher == "expected_value":
        samples, report = teacher_samples(c, tools, tok, tasks, bars, console)
    elif c.sft.teacher == "cascade":
        samples, report = cascade_samples(c, tools, tok, tasks, console)
    else:
        tasks = paired_tasks(tasks, c.data.preference_pairs, c.seed) if c.sft.paired else tasks
        samples = demo_samples(tasks, tools, tok, launch.prompter_kwargs(c), c.agent.loop_kwargs(),
                               eos_token_ids(tok), c.sft.demos, c.seed, c.sampling.max_tokens,
                               candidates=c.sft.candidates, scorer=scorer)
    loop = sft_loop(c.sft, lambda batch, lr: ray.get(learner.sft_update.remote(batch, lr=lr)), samples, c.seed,
                    bars, console, check if sft_checks(c) else None)
    ray.get(learner.reset_reference.remote())  # KL anchors RL to the warm-started policy
    return {"sft_samples": len(samples), **loop, **report}


def sft_loop(sc: Any, update: Callable[[list[Any], float], dict[str, float]], samples: list[Any], seed: int,
             bars: Any, console: Any, check: Callable[[int], dict[str, Any]] | None = None) -> dict[str, Any]:
    """`sc.steps` SFT updates; with `check` (sft.until_agreement with route hints, sft.until_follows) then chunks of
    steps // 4 more, each followed by `check(steps done)` -> {"passed": bool, "line": what the policy does, "below":
    what falls short, **figures} (cluster/heldout.train_check, on training tasks), until one passes or sc.max_steps
    are done (the lr decays over those). {sft_loss, sft_steps_done[, sft_agreement_checks]}: each check's record is
    its figures with `step`, `passed` and `below`."""
    total = max(sc.steps, sc.max_steps) if check else sc.steps
    chunk = max(1, sc.steps // 4)
    metrics: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    bar = bars.add("SFT steps", total)
    for i, batch in enumerate(sft_batches(samples, total, sc.batch_size, seed)):
        metrics.append(update(batch, sft_lr(sc, i, total)))
        bars.advance(bar)
        done = i + 1
        if done % max(1, sc.steps // 5) == 0 or done == total:
            console.print(f"  sft {done}/{sc.steps if done <= sc.steps else total}: loss {metrics[-1]['sft_loss']:.3f}")
        if check is None or done < sc.steps or (done - sc.steps) % chunk or done == total:
            continue
        result = dict(check(done))
        line = result.pop("line", "")
        checks.append({"step": done, **result, "passed": bool(result["passed"])})
        console.print(f"  sft {done}: {line}" + ("" if result["passed"] else f"; {chunk} more steps"))
        if result["passed"]:
            break
    bars.remove(bar)
    return {"sft_loss": metrics[-1]["sft_loss"] if metrics else float("nan"), "sft_steps_done": len(metrics),
            **({"sft_agreement_checks": checks} if check else {})}


def sft_checks(cfg: Any) -> list[str]:
    """What SFT checks the policy for before it stops (cluster/heldout.train_check): `hints` (sft.until_agreement, with
    route hints: it calls its hint's plan) and `follows` (sft.until_follows: its $ follows the eval presets)."""
    s = cfg.sft
    return [name for name, on in (("hints", s.until_agreement and cfg.agent.route_hints), ("follows", s.until_follows))
            if on]


def teacher_samples(cfg: Any, tools: RayToolClient, tok: Any, train: list[Task], bars: Any, console: Any
                    ) -> tuple[list[Any], dict[str, Any]]:
    """Exploration -> estimator router (saved) -> cross-fitted expected-value labels -> their episodes as
    training samples; and a report (label mix per preset, timings)."""
    from orchestra.agent.prompt import Prompter, preference_text
    from orchestra.routing.cascade import as_plan, cascade_outcomes, frontier_cascades
    from orchestra.routing.estimator import Expected, RouteEstimator, TaskFeatures
    from orchestra.routing.explore import explore
    from orchestra.routing.hints import attach
    from orchestra.routing.plans import ADAPTIVE_TOOLS, enumerate_plans
    from orchestra.routing.router import EstimatorRouter
    from orchestra.routing.teacher import cross_fitted, teacher_labels
    from reward.score import episode_scorer
    from tools.retrieval.dense import embed_texts

    c, r, rc = cfg, cfg.reward, cfg.router
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
    estimator = RouteEstimator(plans, C=rc.C, alpha=rc.alpha, seed=c.seed, select_by=rc.select_by).fit(
        X, ids, outcomes, features.n_meta, features.n_stats)
    console.print(f"  estimator router: chose {estimator.selection.get('chosen', estimator.model['kind'])} by "
                  f"{estimator.folds}-fold cross-validation ({rc.select_by})"
                  + (f"; {estimator.selection['rule']}" if estimator.selection.get("rule") else ""))
    EstimatorRouter(estimator, features, r.cost_scale, r.latency_scale, model_dir=c.zoo.retriever.model_dir,
                    embed_dtype=rc.embed_dtype).save(run_dir)
    expected = cross_fitted(X, ids, outcomes, plans, folds=rc.folds, seed=c.seed, C=rc.C, alpha=rc.alpha,
                            n_meta=features.n_meta, select_by=rc.select_by, n_stats=features.n_stats)
    m = len(tasks)  # the training tasks' rows come first; the pool's rows only served the fits
    expected = Expected(expected.p_correct[:m], expected.cost_usd[:m], expected.latency_s[:m])
    if c.agent.route_hints:  # the prompt's router line (orchestra/agent/hints.py), on the trainer's own tasks
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
    if c.sft.pref_balance:  # and rare priorities (the words the prompt shows), so every bin is read, not the presets'
        words = [preference_text(lab.task.pref, c.agent.preference_words, c.agent.preference_numbers,
                                 c.agent.preference_levels) for lab in labels]
        repeats = [a * b for a, b in zip(repeats, label_repeats(words, c.sft.pref_balance), strict=True)]
    samples = scripted_samples([(lab.task, script_of(lab.plan)) for lab in labels], tools, tok,
                               launch.prompter_kwargs(c), c.agent.loop_kwargs(), eos, c.sampling.max_tokens,
                               repeats=repeats, note=note(c))
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


def note(cfg: Any) -> Callable[[str], str] | None:
    """What every demonstrated call opens with: the prompt's preference restated (sft.restate_preference), or none."""
    from orchestra.agent.prompt import preference_note

    return preference_note if cfg.sft.restate_preference else None


def cascade_episodes(cfg: Any, train: list[Task]) -> tuple[list[tuple[Task, Script]], int, int]:
    """`sft.teacher: cascade`'s demonstrations: each task under each vector of the preference pairing consults the
    cascade's two tiers, then, under the `sft.escalate_under` vectors, (sft.escalate_on=random) escalates to its
    final tier with probability `sft.escalate_share` (seeded per task and vector), whatever the two answered, else
    submits the first answer: consulting without reading; or (escalate_on=disagree) reads: the cascade's own rule
    (escalate exactly when the two answers disagree, orchestra/routing/cascade.py `choose`, which reads them from the
    prompt as a policy would). Under the other vectors it submits. -> (episodes, escalated, reading)."""
    from orchestra.agent.scripted import call_text
    from orchestra.preferences import is_among, parse_preference
    from orchestra.routing.cascade import choose, parse

    c = cfg
    cascade = parse(c.sft.cascade)
    a, b = cascade.consult
    under = [parse_preference(v) for v in c.sft.escalate_under]
    episodes: list[tuple[Task, Script]] = []
    escalated = read = 0
    for i, task in enumerate(paired_tasks(train, c.data.preference_pairs, c.seed)):
        escalates = is_among(task.pref, under)
        script: Script
        if escalates and c.sft.escalate_on == "disagree":
            read += 1
            script = choose(cascade)
        else:
            esc = escalates and random.Random(f"cascade:{c.seed}:{i}:{task.id}").random() < c.sft.escalate_share
            escalated += esc
            last = call_text("answer", {"model": cascade.final}) if esc else call_text("submit", {"model": a})
            script = [call_text("consult", {"model": a}), call_text("consult", {"model": b}), last]
        episodes.append((task, _restating(script) if c.sft.restate else script))
    return episodes, escalated, read


def _restating(script: Script) -> Callable[[int, str], str]:
    """`script` whose calls, once the prompt shows two or more answers, open with their restatement (sft.restate)."""
    from orchestra.agent.parse import parse
    from orchestra.agent.prompt import restatement
    from orchestra.agent.scripted import as_rule

    rule = as_rule(script)

    def noted(turn: int, prompt: str) -> str:
        call = rule(turn, prompt)
        return restatement(prompt, parse(call).calls[0].name) + call

    return noted


def cascade_samples(cfg: Any, tools: RayToolClient, tok: Any, train: list[Task], console: Any
                    ) -> tuple[list[Any], dict[str, Any]]:
    """The cascade teacher's demonstrations (`cascade_episodes`) played through the agent loop -> SFT samples."""
    c = cfg
    episodes, escalated, read = cascade_episodes(c, train)
    samples = scripted_samples(episodes, tools, tok, launch.prompter_kwargs(c), c.agent.loop_kwargs(),
                               eos_token_ids(tok), c.sampling.max_tokens, note=note(c))
    n = max(len(episodes), 1)
    how = (f"following its rule on {read} (under {', '.join(c.sft.escalate_under)}), submitting on the rest" if read
           else f"escalating on {escalated} ({escalated / n:.0%}, whatever the experts answered)")
    console.print(f"  cascade teacher: {len(episodes)} demonstrations of {c.sft.cascade}, {how} -> {len(samples)} "
                  "samples")
    return samples, {"teacher_cascade": c.sft.cascade, "teacher_escalated": escalated / n, "teacher_reading": read / n}


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


def hint_heldout(run_dir: Path, train: list[Task], heldout: list[Task]) -> None:
    """agent.route_hints: held-out tasks get the fitted router's estimates (training tasks got theirs in
    `teacher_samples`, cross-fitted); both task files are rewritten, so a resumed run and `make eval` read the same."""
    from orchestra.data.tasks import save_tasks
    from orchestra.routing.router import EstimatorRouter
    from tools.retrieval.dense import embed_texts

    EstimatorRouter.load(run_dir, embed_texts).attach_hints(heldout)
    save_tasks(train, Path(run_dir) / "data" / "train.jsonl")
    save_tasks(heldout, Path(run_dir) / "data" / "heldout.jsonl")


def warm_start_policy(cfg: Any, tool_handles: dict[str, Any], tasks: list[Task], out_dir: str | Path,
                      console: Any) -> dict[str, float]:
    """The warm start as the first stage of a verl job (`verl.warm_start=true`, cluster/verl_job.py): a local
    learner actor (on `cluster.learner_gpus` devices; LoRA adapters when model.lora.r > 0, merged at the end)
    warm-starts the policy on the job's own tool servers, and the result is written as a plain HF checkpoint (model
    + tokenizer; the learner's optimizer, reference and RNG files left out) that verl's trainer starts from."""
    import shutil

    from actors.learner import ADAPTER_DIR, OPTIMIZER_FILE, REF_FILE, RNG_FILE, STATE_FILE
    from cluster.progress import Bars

    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    learner = launch.start_learner(cfg, name="warm-start-learner")
    try:
        # a learner that cannot be placed (no node with cluster.learner_gpus free GPUs: e.g. `ray up`'s GPU workers
        # never launched) would otherwise wait forever at its first call, silently
        launch.wait_ready(cfg, [learner.version.remote()],
                          f"the warm-start learner (cluster.learner_gpus={cfg.cluster.learner_gpus:g})")
        with Bars(console) as bars:
            report = warm_start(cfg, learner, tool_handles, tasks, bars, console)
        ray.get(learner.save.remote(str(tmp)))  # a peft learner writes the merged weights as model.safetensors
    finally:
        ray.kill(learner)  # its devices go back before verl places its workers
    for name in (OPTIMIZER_FILE, RNG_FILE, STATE_FILE, REF_FILE):
        (tmp / name).unlink(missing_ok=True)
    shutil.rmtree(tmp / ADAPTER_DIR, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    console.print(f"  warm start: {report.get('sft_samples', 0)} samples, loss {report.get('sft_loss', float('nan')):.3f}; "
                  f"policy for verl in {out}")
    return report
