"""Held-out evaluation during training: what the run's `heldout_reward_gain` is measured on.

Every held-out task is played `eval.seeds` times under each preset of `eval.presets` (default: the one
`eval.preference`), unscored by the reward actor and at the evaluation temperature, then scored here with the
`scalar` rubric under that preset (absolute, not group-relative: orchestra/rundir/records.score_kwargs). Each
episode's seed depends on (task, k) only, not on the evaluation's tag or the preset, so the evaluations before
and after RL draw the same random numbers (common random numbers: less noise in the gain they measure).
The summary's `score` is the mean over the presets of their mean scores; `by_pref` holds each preset's own
figures, and `pref_spread` / `monotone` say whether $ follows the cost weight (accuracy-first $ ÷ cost-first $;
$ falling strictly along accuracy-first, balanced, cost-first). The presets are *trained* vectors (the warm start
labels under them, RL pairs them): those figures say how the policy treats held-out tasks under vectors it was
taught. With `eval.sweep` the held-out tasks are also played under the adherence sweep, vectors no training used
(`unseen_sweep` checks that against every vector of the run: the tasks' own, the teacher's fixed and sampled ones,
the RL pairing's), and `sweep_summary` gives its `adherence` (−Spearman of cost weight and $) and points.
Under `agent.route_hints` every summary also says how often the policy called the plan its prompt's router line
suggested (`hint_agreement`, per preset in `by_pref`): a hinted policy that never learned to copy the line
collapses to one plan per preset, and `hint_warning` says so after SFT instead of leaving it to the figures
(cluster/sft_check.py measures the same on training tasks while SFT runs). `router_summary` plays the run's estimator
router on the same tasks, presets and sweep: the baseline the policy is measured, and judged, against.
When to evaluate is cluster/trainer.py's business.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from statistics import mean
from typing import Any

from actors.rollout_worker import EpisodeResult
from orchestra.agent.hints import suggestion
from orchestra.eval.adherence import PREFIX, check_unseen, sweep_points, sweep_preferences, task_costs
from orchestra.eval.adherence import adherence as adherence_of
from orchestra.eval.escalation import escalation
from orchestra.preferences import (
    COST_ORDER,
    paired_preferences,
    parse_pairs,
    preset,
)
from orchestra.routing.cascade import expected_calls, is_cascade
from orchestra.rundir.records import episode_seed, score_kwargs
from orchestra.types import Preference, Task
from reward.score import Scored, score_group


def presets(cfg: Any) -> list[str]:
    return list(cfg.eval.presets) or [cfg.eval.preference]


def requests(tasks: list[Task], seed: int, seeds: int, tag: str, prefs: list[str] | None = None,
             vectors: dict[str, Preference] | None = None) -> list[dict[str, Any]]:
    """One request per (preset, k, task), a group of one each, seeded by (run seed, task, k). Without `prefs`
    each task keeps its own preference (and the ids their old, preset-free form); `vectors` gives named vectors
    other than presets (the sweep)."""
    out = []
    vectors = vectors or {}
    for name in prefs or [""]:
        pre = f"{name}-" if name else ""
        for k in range(seeds):
            for t in tasks:
                task = {**t.to_dict(), "pref": dict(vectors.get(name) or preset(name))} if name else t.to_dict()
                out.append({"task": task, "uid": f"eval-{tag}-{pre}{t.id}-{k}", "group_size": 1,
                            "seed": episode_seed(seed, "eval", t.id, k), "episode_id": f"eval-{tag}-{pre}{t.id}-{k}"})
    return out


def score(results: list[EpisodeResult], requests: list[dict[str, Any]], cfg: Any) -> list[Scored]:
    """The held-out score of each episode (the scalar rubric under its request's preference, no training-only
    terms). Results are matched to their requests by uid (one episode per held-out request)."""
    by_uid = {r["uid"]: Task.from_dict(r["task"]) for r in requests}
    trajs = [r.traj for r in results]
    tasks = [by_uid[t.uid] for t in trajs]
    return asyncio.run(score_group(trajs, tasks, **score_kwargs(cfg, "eval")))


def summary(results: list[EpisodeResult], scored: list[Scored], tasks: list[Task],
            requests: list[dict[str, Any]] | None = None, prefs: list[str] | None = None) -> dict[str, Any]:
    """Means over the episodes (score, accuracy, $, seconds, format, answered, tool mix) and per task family, where
    the routing improved; with several presets, `score` is the mean of the presets' scores and `by_pref` holds
    each preset's own summary."""
    prefs = prefs or []
    if len(prefs) <= 1:
        out = _summary(results, scored, tasks)
        out["rewards"] = [{"pref": prefs[0] if prefs else "", "task": r.traj.task_id, "reward": s.reward}
                          for r, s in zip(results, scored, strict=True)]
        if prefs:
            out["by_pref"] = {prefs[0]: {k: v for k, v in out.items() if k != "by_family"}}
        return out
    uid_pref = preset_of(requests or [], prefs)
    parts: dict[str, tuple[list[EpisodeResult], list[Scored]]] = {p: ([], []) for p in prefs}
    for r, s in zip(results, scored, strict=True):
        name = uid_pref[r.uid]
        parts[name][0].append(r)
        parts[name][1].append(s)
    per_task = task_costs([{"policy": "", "preference": uid_pref[r.uid], "task_id": r.traj.task_id,
                            "cost_usd": s.cost_usd} for r, s in zip(results, scored, strict=True)], "")
    by_pref = {p: {**_summary(rs, ss, tasks), "task_usd": per_task[p]} for p, (rs, ss) in parts.items() if rs}
    out = _summary(results, scored, tasks)
    out["rewards"] = [{"pref": uid_pref[r.uid], "task": r.traj.task_id, "reward": s.reward}
                      for r, s in zip(results, scored, strict=True)]
    out["score"] = mean(v["score"] for v in by_pref.values())
    out["by_pref"] = {p: {k: v for k, v in b.items() if k != "by_family"} for p, b in by_pref.items()}
    out.update(adherence(out["by_pref"]))
    return out


def preset_of(requests: list[dict[str, Any]], prefs: list[str]) -> dict[str, str]:
    """Request uid -> the name of the preset (of `prefs`) its task was played under."""
    name_of = {tuple(sorted(preset(p).items())): p for p in prefs}
    return {q["uid"]: name_of[tuple(sorted(q["task"]["pref"].items()))] for q in requests}


# below this share of held-out episodes under some preset the policy is not following its route hints: the runs
# that learned to copy the line agreed on 89-100 % under every preset, those that collapsed on 29 % under one
# (docs/quality.md, "Per-question routing by the policy")
HINT_AGREEMENT_LOW = 0.8


def hint_agreement(results: list[EpisodeResult], requests: list[dict[str, Any]], prefs: list[str] | None = None
                   ) -> dict[str, Any]:
    """{"hint_agreement": share of episodes whose calls, in order, are the plan the task's router line suggests
    under its request's preference, "hint_agreement_by_pref": the same per preset (with several `prefs`)}; {}
    when no request carries router estimates (route hints off)."""
    by_uid = {q["uid"]: Task.from_dict(q["task"]) for q in requests}
    uid_pref = preset_of(requests, prefs) if len(prefs or []) > 1 else {}
    hits: dict[str, list[float]] = {}
    for r in results:
        found = suggestion(by_uid[r.traj.uid])
        if found is None:
            continue
        calls = [[rec.name, rec.tool_id] for rec in r.traj.tool_records]
        # a cascade's calls depend on what its consults answered in this very episode
        want = expected_calls(found[0], r.traj.tool_records) if is_cascade(found[0]) else [list(c) for c in found[1]]
        hits.setdefault(uid_pref.get(r.traj.uid, ""), []).append(float(calls == want))
    if not hits:
        return {}
    out: dict[str, Any] = {"hint_agreement": mean(v for h in hits.values() for v in h)}
    if len(prefs or []) > 1:
        out["hint_agreement_by_pref"] = {k: mean(v) for k, v in hits.items()}
    return out


def hint_warning(summary: dict[str, Any]) -> str:
    """A warning when the policy follows its route hints on fewer than HINT_AGREEMENT_LOW of the held-out episodes
    under some preset ("" otherwise, or without hints)."""
    shares = summary.get("hint_agreement_by_pref") or (
        {"all presets": summary["hint_agreement"]} if "hint_agreement" in summary else {})
    low = {k: v for k, v in shares.items() if v < HINT_AGREEMENT_LOW}
    if not low:
        return ""
    return ("the policy calls the plan its route hint suggests on only " + ", ".join(
        f"{100 * v:.0f} % under {k}" for k, v in low.items()) + " of the held-out questions: SFT has not taught it to "
        "copy the router line, so it routes per preset rather than per question. The copy is learned late and "
        "suddenly; raise sft.steps, or let SFT run on until it is (sft.until_agreement, docs/configuration.md).")


def adherence(by_pref: dict[str, dict[str, Any]]) -> dict[str, float]:
    """pref_spread (accuracy-first $ ÷ cost-first $) and monotone (1: $ falls strictly along accuracy-first,
    balanced, cost-first) when those presets were scored."""
    if not all(p in by_pref for p in COST_ORDER):
        return {}
    costs = [by_pref[p]["cost_usd"] for p in COST_ORDER]
    spread = costs[0] / costs[-1] if costs[-1] > 0 else float("inf")
    return {"pref_spread": spread, "monotone": float(all(a > b for a, b in zip(costs, costs[1:])))}


def training_vectors(cfg: Any, train: list[Task]) -> list[Preference]:
    """Every vector the run trains on (a superset: the teacher's draws for every training task, the pairing's
    for every task and step): the tasks' own, the teacher's fixed and sampled ones, the RL pairing's."""
    from orchestra.routing.teacher import label_vectors

    s = cfg.sft
    out = [t.pref for t in train]
    if s.teacher == "expected_value":
        out += [v for t in train for v in label_vectors(t, s.vectors_sampled, cfg.seed, s.vectors, s.sample_cost,
                                                        s.sample_latency, s.sample_latency_zero)]
    if cfg.data.preference_pairs:
        k, fixed = parse_pairs(cfg.data.preference_pairs)
        out += fixed
        if k:
            out += [v for step in range(-1, cfg.algo.steps + 1) for t in train
                    for v in paired_preferences(cfg.data.preference_pairs, t.id, step, cfg.seed, list(t.model_mapping))]
    return out


def unseen_sweep(cfg: Any, train: list[Task]) -> dict[str, Preference]:
    """The adherence sweep's named vectors, after checking that none is a vector the run trained on (ValueError)."""
    check_unseen(training_vectors(cfg, train))
    return sweep_preferences()


def sweep_read_as_trained(cfg: Any, train: list[Task]) -> dict[str, str]:
    """The sweep's points whose preference line, as the policy reads it (the prompt's one rendering, cfg.agent), is
    also the line of a vector the run trained on, of a rung of SFT's check (which decides when SFT stops) or of a
    preset: {sweep name: what it reads like}; empty when the sweep is unseen as the policy sees it. Bin words without
    numbers (agent.preference_numbers=false) read every point like a rung of the check: the sweep then measures
    held-out tasks at trained prompts, and the run says so (`heldout_sweep_read_as_trained`, the verdict's line)."""
    from orchestra.agent.prompt import preference_text
    from orchestra.preferences import CHECK_COSTS, PRESETS, sweep_vectors

    a = cfg.agent

    def line(p: Preference) -> str:
        return preference_text(p, a.preference_words, a.preference_numbers, a.preference_levels, a.number_format,
                               a.latency_words)

    seen = {line(v): f"a training vector (cost {v.get('cost', 0.0):g}, latency {v.get('latency', 0.0):g})"
            for v in training_vectors(cfg, train)}
    seen |= {line(v): f"SFT's check rung cost {name[len(PREFIX):]}" for name, v in sweep_vectors(CHECK_COSTS).items()}
    seen |= {line(v): f"the preset {name}" for name, v in PRESETS.items()}
    lines = {name: line(v) for name, v in sweep_preferences().items()}
    return {name: seen[text] for name, text in lines.items() if text in seen}


def sweep_summary(results: list[EpisodeResult], scored: list[Scored], requests: list[dict[str, Any]]
                  ) -> dict[str, Any]:
    """The sweep's points (cost weight, mean $, accuracy) and `adherence` (orchestra/eval/adherence.py)."""
    weight = {q["uid"]: q["task"]["pref"]["cost"] for q in requests}
    records = [{"policy": "orchestrator", "preference": f"{PREFIX}{weight[r.uid]:g}", "task_id": r.traj.task_id,
                "cost_usd": s.cost_usd, "correct": s.correct} for r, s in zip(results, scored, strict=True)]
    points, per_task = sweep_points(records, "orchestrator"), task_costs(records, "orchestrator")
    return {"adherence": adherence_of(points), "points": [
        {"cost_weight": w, "cost_usd": c, "accuracy": a, "task_usd": per_task[f"{PREFIX}{w:g}"]} for w, c, a in points]}


def _summary(results: list[EpisodeResult], scored: list[Scored], tasks: list[Task]) -> dict[str, Any]:
    by_id = {t.id: t for t in tasks}
    trajs = [r.traj for r in results]
    mix = Counter(k for s in scored for k, v in s.tool_counts.items() for _ in range(v))
    families: dict[str, list[Scored]] = {}
    for s, tr in zip(scored, trajs, strict=True):
        families.setdefault(str(by_id[tr.task_id].meta.get("family", "all")), []).append(s)
    return {"score": mean(s.reward for s in scored), "accuracy": mean(float(s.correct) for s in scored),
            "by_family": {f: {"score": mean(s.reward for s in v), "accuracy": mean(float(s.correct) for s in v),
                              "cost_usd": mean(s.cost_usd for s in v), "episodes": len(v)}
                          for f, v in sorted(families.items())},
            "cost_usd": mean(s.cost_usd for s in scored), "latency_s": mean(s.latency_s for s in scored),
            "format_ok": mean(float(all(t.format_ok for t in tr.turns)) for tr in trajs),
            "answered": mean(float(tr.termination == "answered") for tr in trajs),
            "tool_mix": {k: v / len(scored) for k, v in sorted(mix.items())}, "episodes": len(scored),
            **escalation(trajs)}  # with consult / submit: P(escalate | disagree), P(escalate | agree)


def router_records(cfg: Any, run_dir: Path, tasks: list[Task], tools: Any, tokenizer: Any,
                   vectors: dict[str, Preference]) -> list[dict[str, Any]] | None:
    """The estimator router (`<run_dir>/router/`, saved by the expected-value warm start) played on `tasks` under each
    named vector: scripted episodes in this process, scored as the policy's are (orchestra/eval/runner.py records);
    None when the run has no router."""
    from orchestra.agent.prompt import Prompter
    from orchestra.engine import eos_token_ids
    from orchestra.eval.runner import Evaluator
    from orchestra.routing import registry
    from reward.score import episode_scorer
    from tools.retrieval.dense import embed_texts

    router = registry.load_saved(run_dir, embed_texts, [registry.get("estimator")]).get("estimator")
    if router is None:
        return None
    r, m, eos = cfg.reward, cfg.model, eos_token_ids(tokenizer)
    ev = Evaluator(tokenizer, Prompter(tokenizer, **cfg.agent.prompter_kwargs()), {0: tools}, eos[0],
                   agent_kwargs={**cfg.agent.loop_kwargs(), "eos_token_ids": eos},
                   score=episode_scorer(dict(r.judges), cost_scale=r.cost_scale, latency_scale=r.latency_scale,
                                        price_in=m.price_in_per_mtok, price_out=m.price_out_per_mtok),
                   concurrency=32, routers={"estimator": router.script})
    return asyncio.run(ev.run(tasks, ["estimator"], dict(vectors), [0], pref_policies=("estimator",)))


def router_costs(records: list[dict[str, Any]]) -> dict[str, float]:
    """Mean $ per episode of the router's records, by vector name."""
    acc: dict[str, list[float]] = {}
    for x in records:
        acc.setdefault(x["preference"], []).append(float(x["cost_usd"]))
    return {k: mean(v) for k, v in acc.items()}


def router_summary(cfg: Any, run_dir: Path, tasks: list[Task], tools: Any, tokenizer: Any,
                   sweep: dict[str, Preference] | None = None) -> dict[str, Any]:
    """The estimator router on the same held-out tasks, presets and tools as the policy: the baseline the orchestrator
    is measured against, and (with `sweep`) its $ along the unseen sweep, `sweep`: {points}, the curve the verdict
    judges the policy's sweep by (orchestra/eval/verdict.py). {} when the run has no router."""
    from orchestra.eval.stats import summarize

    names = presets(cfg)
    records = router_records(cfg, run_dir, tasks, tools, tokenizer, {**{p: preset(p) for p in names}, **(sweep or {})})
    if records is None:
        return {}
    on_presets = [x for x in records if x["preference"] in names]
    rows = {row["preference"]: row for row in summarize(on_presets)}
    rewards = [{"pref": x["preference"], "task": x["task_id"], "reward": x["reward"]} for x in on_presets]
    by_pref = {p: {"score": rows[p]["score"], "accuracy": rows[p]["accuracy"], "cost_usd": rows[p]["cost_cents"] / 100,
                   "latency_s": rows[p]["latency_s"], "tool_mix": rows[p]["tool_mix"]} for p in names if p in rows}
    out = {"score": mean(v["score"] for v in by_pref.values()), "by_pref": by_pref, **adherence(by_pref),
           "rewards": rewards}
    if sweep:
        on_sweep = [{**x, "policy": "router"} for x in records if x["preference"] in sweep]
        out["sweep"] = {"points": [{"cost_weight": w, "cost_usd": c, "accuracy": a}
                                   for w, c, a in sweep_points(on_sweep, "router")]}
    return out


def add_interval(summary: dict[str, Any], key: str, a: dict[str, Any], b: dict[str, Any], what: str) -> str:
    """`<key>_lo` / `<key>_hi` in `summary`: the paired bootstrap 95 % interval of a − b (`paired_gain`), and the
    line saying so ("" when there are no rewards to pair)."""
    gain = paired_gain(a, b)
    if not gain:
        return ""
    summary[f"{key}_lo"], summary[f"{key}_hi"] = gain["lo"], gain["hi"]
    return (f"held-out {what}: {gain['diff']:+.4f} [{gain['lo']:+.4f}, {gain['hi']:+.4f}] (paired bootstrap 95 %, "
            f"{gain['tasks']:.0f} tasks x {gain['presets']} presets)")


def paired_gain(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """Held-out score of evaluation `a` minus `b` (each a summary with `rewards`) with its paired bootstrap 95 %
    interval (orchestra/eval/stats.py): paired per (preset, task), a task's seeds averaged and its presets
    resampled together; the mean of the per-preset differences, as `score` is the mean of the presets' scores.
    {} when either lacks rewards."""
    from orchestra.eval.stats import paired_bootstrap_diff

    def means(summary: dict[str, Any]) -> dict[tuple[str, str], float]:
        acc: dict[tuple[str, str], list[float]] = {}
        for r in summary.get("rewards", []):
            acc.setdefault((r["pref"], r["task"]), []).append(float(r["reward"]))
        return {k: mean(v) for k, v in acc.items()}

    x, y = means(a), means(b)
    keys = sorted(set(x) & set(y))
    if not keys:
        return {}
    prefs = {p for p, _ in keys}
    out = paired_bootstrap_diff([x[k] for k in keys], [y[k] for k in keys], groups=[t for _, t in keys])
    return {"diff": out["diff"], "lo": out["lo"], "hi": out["hi"], "tasks": out["n"], "presets": len(prefs)}
