"""Routers compared on recorded outcomes (routing logs, replay zoos): fitted on a training split, judged on held-out
questions, no episodes played.

A single-call route's outcome on a replay zoo is the recorded one, so the routers' own quality can be measured in
seconds and free of any policy's. `compare` fits, on the same training rows, the routing policies the registry
offers here (orchestra/routing/registry.py, where=holdout; a new one joins every table below):
  estimator          the estimator router as runs now fit it (per-run selection, orchestra/routing/select.py);
  estimator_routing  the same, its model selected by cross-validated routing value instead of log-loss;
  estimator_before   the estimator with the selection off: logistic regression at C = 1 on every feature, what
                     runs fitted before the selection existed (router.C's default);
  family             the per-family fixed router (orchestra/routing/family.py), the baseline to beat;
then reports on the held-out rows: the P(correct) log-loss; RouteLLM's yardstick (orchestra/eval/yardstick.py:
two models, the score P̂(strong right) − P̂(weak right); more, the accuracy-vs-$ curve of a sweep of the cost
weight, the family router swept the same way); where the family router lies above the estimator's curve (with
95 % intervals of that lead and of the APGR difference, the held-out questions resampled: `curve_intervals`); and,
under each preset, accuracy, $ and reward with paired bootstrap intervals (orchestra/eval/stats.py) of
estimator − family and estimator − always-strongest. bench/quality.py (`only=routers`) feeds it RouterArena's
two-model log (`router_arena`) and the MMLU-Pro replay zoo (`replay_zoo`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestra.eval import yardstick as ys
from orchestra.eval.stats import fmt_diff, frontier_accuracy, paired_bootstrap_diff
from orchestra.preferences import preset
from orchestra.routing import registry
from orchestra.routing.estimator import Expected, expected_reward
from orchestra.routing.plans import Outcome, Plan
from orchestra.routing.registry import Explored
from orchestra.types import Preference, Task
from orchestra.value import scalar_value

USD_SWEEP = (0.0, *(10.0 ** (k / 4) for k in range(-12, 13)))  # cost weights, as cluster/yardstick.py sweeps them
PRESETS = ("accuracy-first", "balanced", "cost-first")
EPS = 1e-6


@dataclass
class Recorded:
    """Recorded outcomes: per task (rows) and single-call plan (columns) correctness, $ and seconds, and the task
    features the estimator reads (TaskFeatures: `n_meta` one-hot meta columns after the embedding, then `n_stats`
    text-statistics columns)."""

    tasks: list[Task]
    plans: list[Plan]
    correct: np.ndarray
    cost: np.ndarray
    latency: np.ndarray
    X: np.ndarray
    n_meta: int = 0
    n_stats: int = 0

    def outcomes(self, rows: Sequence[int]) -> list[Outcome]:
        return [Outcome(self.tasks[i].id, p.name, bool(self.correct[i, j] >= 0.5), float(self.cost[i, j]),
                        float(self.latency[i, j])) for i in rows for j, p in enumerate(self.plans)]


def reward(pref: Preference, correct: np.ndarray, cost: np.ndarray, latency: np.ndarray, cost_scale: float,
           latency_scale: float) -> np.ndarray:
    """The `scalar` rubric per episode of one call (orchestra/value.py; no tool weights: every plan here is one
    `answer` call)."""
    return scalar_value(pref, correct, cost, latency, cost_scale, latency_scale)


def picks(exp: Expected, plans: Sequence[Plan], pref: Preference, cost_scale: float, latency_scale: float
          ) -> np.ndarray:
    """Column chosen per row under one preference (ties: the earlier plan, as RouteEstimator.choose)."""
    return np.argmax(expected_reward(exp, plans, pref, cost_scale, latency_scale), axis=1)


def fit_routers(rec: Recorded, train: Sequence[int], seed: int = 0) -> dict[str, Any]:
    """Every routing policy the registry offers here (orchestra/routing/registry.py, where=holdout), fitted on the
    `train` rows."""
    explored = Explored([rec.tasks[i] for i in train], rec.X[list(train)], rec.plans, rec.outcomes(train),
                        rec.n_meta, rec.n_stats, seed)
    return {p.name: p.fit(explored) for p in registry.among("holdout") if p.fit is not None}


def compare(rec: Recorded, train: Sequence[int], test: Sequence[int], cost_scale: float, latency_scale: float,
            label: str = "", seed: int = 0) -> tuple[dict[str, float], list[str]]:
    """(figures, INFO lines) for the routers fitted on `train`, judged on `test` (module docstring)."""
    test = list(test)
    routers = fit_routers(rec, train, seed)
    est = routers["estimator"]
    tasks = [rec.tasks[i] for i in test]
    exps: dict[str, Expected] = {k: registry.get(k).expected(r, tasks, rec.X[test]) for k, r in routers.items()}
    ok, usd, lat = rec.correct[test], rec.cost[test], rec.latency[test]
    rows = np.arange(len(test))
    tag = f" ({label})" if label else ""
    scores = est.selection.get("scores", {})
    best3 = ", ".join(f"{k} {v['log_loss']:.4f}" for k, v in sorted(scores.items(), key=lambda kv: kv[1]["log_loss"])[:3])
    lines = [f"estimator{tag}: {len(train)} training / {len(test)} held-out tasks; chose {est.selection.get('chosen')}"
             f" by cross-validated log-loss (best: {best3})"
             + (f"; {est.selection['rule']}" if est.selection.get("rule") else "")]
    figures: dict[str, float] = {}
    ll = {k: -np.sum(ok * np.log(np.clip(e.p_correct, EPS, 1 - EPS))
                     + (1 - ok) * np.log(np.clip(1 - e.p_correct, EPS, 1 - EPS)), axis=1) / ok.shape[1]
          for k, e in exps.items()}
    for k, v in ll.items():
        figures[f"logloss_{k}"] = float(v.mean())
    for other in ("estimator_before", "family"):
        lines.append(f"held-out log-loss{tag}: estimator − {other} {fmt_diff(paired_bootstrap_diff(ll['estimator'], ll[other]), digits=4)}"
                     f" (negative: the estimator's probabilities are better)")
    strong, cheap = ys.ends(ok, usd)
    chosen = {k: np.array([picks(e, rec.plans, {"accuracy": 1.0, "cost": w, "latency": 0.0}, cost_scale,
                                 latency_scale) for w in USD_SWEEP]) for k, e in exps.items()}  # [weights, tasks]
    sweep = {k: [(float(usd[rows, c].mean()), float(ok[rows, c].mean())) for c in cs] for k, cs in chosen.items()}
    if ok.shape[1] == 2:
        two = {k: exps[k].p_correct[:, strong] - exps[k].p_correct[:, cheap]
               for k in ("estimator", "estimator_routing", "estimator_before")}
        fam = {f"w={w:g}": (float(np.mean(picks(exps["family"], rec.plans, {"accuracy": 1.0, "cost": w}, cost_scale,
                                                latency_scale) == strong)), a)
               for w, (_u, a) in zip(USD_SWEEP, sweep["family"], strict=True)}  # (strong share, accuracy) points
        figures.update(ys.log_yardstick(ok, usd, scores=two, policies={"family": fam})["figures"])
        best = int(np.argmax(ok.mean(axis=0)))
        if best != strong:  # the priciest model is the less accurate: RouteLLM's reading needs strong = better
            lines.append(f"yardstick{tag}: the priciest model is the less accurate one, so yardstick_* APGR is lower-"
                         "is-better here (oracle below random's 0.5); yardstick_accstrong_* take the more accurate "
                         "model as strong (higher APGR is better)")
            for k, sc in two.items():
                c = ys.score_curve(ok[:, best], ok[:, strong], -sc)
                figures.update({f"yardstick_accstrong_{f}_{k}": c.summary()[f]
                                for f in ("apgr", "cpt50", "cpt80", "cpt50_first", "cpt80_first")})
            c = ys.points_curve([(1.0 - x, a) for x, a in fam.values()], float(ok[:, strong].mean()),
                                float(ok[:, best].mean()))
            figures.update({f"yardstick_accstrong_{f}_family": c.summary()[f] for f in ("apgr", "cpt50", "cpt80")})
            figures["yardstick_accstrong_apgr_oracle"] = ys.oracle_curve(ok[:, best], ok[:, strong]).apgr
    else:
        figures.update(ys.log_yardstick(ok, usd, sweeps=sweep)["figures"])
    # the family router's sweep points against the estimator's curve: > 0 where the family router is above it
    gaps = [a - frontier_accuracy(u, sweep["estimator"]) for u, a in sweep["family"]]
    if ok.shape[1] > 2:  # how much of either figure is the held-out questions' draw
        for k in ("estimator", "estimator_routing"):
            ci = curve_intervals(ok, usd, chosen[k], chosen["family"])
            lines.append(f"$ curve{tag}: {k} − family APGR [{ci['apgr_diff'][0]:+.3f}, {ci['apgr_diff'][1]:+.3f}], the "
                         f"family router's largest lead [{100 * ci['max_gap'][0]:+.2f}, {100 * ci['max_gap'][1]:+.2f}] "
                         "points (95 %, held-out questions resampled; the lead is a maximum over the sweep, so it "
                         "sits above 0 by chance too)")
    figures["max_gap_family_over_estimator_points"] = 100.0 * max(gaps)
    figures["max_gap_family_over_estimator_routing_points"] = 100.0 * max(
        a - frontier_accuracy(u, sweep["estimator_routing"]) for u, a in sweep["family"])
    lines.append(f"estimator_routing{tag}: chose {routers['estimator_routing'].selection.get('chosen')} by "
                 "cross-validated routing value")
    worst = sweep["family"][int(np.argmax(gaps))]
    lines.append(f"$ curve{tag}: the family router's sweep is at most {100 * max(gaps):+.2f} points above the "
                 f"estimator's curve (at {100 * worst[0]:.4f} ¢, accuracy {worst[1]:.3f}); <= 0: on or above at every cost")
    for name in PRESETS:
        lines += _preset_lines(name, exps, rec.plans, ok, usd, lat, strong, cost_scale, latency_scale, tag, figures)
    return figures, lines


def curve_intervals(ok: np.ndarray, usd: np.ndarray, a: np.ndarray, b: np.ndarray, n: int = 1000, seed: int = 0
                    ) -> dict[str, tuple[float, float]]:
    """95 % intervals, the questions resampled with their choices kept, of APGR(a) − APGR(b) on the $ axis and of
    b's largest lead over a's curve (a, b: [sweep weights, questions] chosen columns; ok / usd: [questions,
    models]). Paired: both routers are judged on each resample's questions."""
    rng = np.random.default_rng(seed)
    strong, cheap = ys.ends(ok, usd)
    diffs, gaps = [], []
    for _ in range(n):
        idx = rng.integers(0, len(ok), len(ok))
        o, u = ok[idx], usd[idx]
        rows = np.arange(len(idx))
        pts = [[(float(u[rows, c[idx]].mean()), float(o[rows, c[idx]].mean())) for c in x] for x in (a, b)]
        anchors = ((float(u[:, cheap].mean()), float(o[:, cheap].mean())),
                   (float(u[:, strong].mean()), float(o[:, strong].mean())))
        diffs.append(ys.usd_curve(pts[0], *anchors).apgr - ys.usd_curve(pts[1], *anchors).apgr)
        gaps.append(max(acc - frontier_accuracy(cost, pts[0]) for cost, acc in pts[1]))
    return {k: (float(np.quantile(v, 0.025)), float(np.quantile(v, 0.975)))
            for k, v in (("apgr_diff", diffs), ("max_gap", gaps))}


def _preset_lines(name: str, exps: dict[str, Expected], plans: Sequence[Plan], ok: np.ndarray, usd: np.ndarray,
                  lat: np.ndarray, strong: int, cost_scale: float, latency_scale: float, tag: str,
                  figures: dict[str, float]) -> list[str]:
    """One preset: each router's accuracy, $ and reward, and the paired differences the issue asks about."""
    pref, rows = preset(name), np.arange(ok.shape[0])
    got = {}
    for k, e in exps.items():
        c = picks(e, plans, pref, cost_scale, latency_scale)
        got[k] = (ok[rows, c], usd[rows, c], reward(pref, ok[rows, c], usd[rows, c], lat[rows, c], cost_scale,
                                                    latency_scale))
    got["strongest"] = (ok[:, strong], usd[:, strong], reward(pref, ok[:, strong], usd[:, strong], lat[:, strong],
                                                              cost_scale, latency_scale))
    key = name.replace("-", "_")
    out = [f"{name}{tag}: " + "; ".join(f"{k} accuracy {v[0].mean():.3f}, {100 * v[1].mean():.4f} ¢, reward "
                                        f"{v[2].mean():.3f}" for k, v in got.items())]
    e, s, f = got["estimator"], got["strongest"], got["family"]
    d_acc_s, d_acc_f = paired_bootstrap_diff(e[0], s[0]), paired_bootstrap_diff(e[0], f[0])
    d_rew_f, d_rew_b = paired_bootstrap_diff(e[2], f[2]), paired_bootstrap_diff(e[2], got["estimator_before"][2])
    figures[f"{key}_accuracy_estimator"], figures[f"{key}_accuracy_family"] = float(e[0].mean()), float(f[0].mean())
    figures[f"{key}_cost_ratio_estimator"] = float(e[1].mean() / s[1].mean())
    figures[f"{key}_acc_gain_vs_strongest_estimator"] = 100.0 * d_acc_s["diff"]
    figures[f"{key}_reward_gain_vs_family_estimator"] = d_rew_f["diff"]
    out.append(f"{name}{tag}: estimator − always-strongest accuracy {fmt_diff(d_acc_s, 100, 1)} points at "
               f"{e[1].mean() / s[1].mean():.2f} of its $; estimator − family: accuracy {fmt_diff(d_acc_f, 100, 1)} "
               f"points, reward {fmt_diff(d_rew_f)}; estimator − estimator_before: reward {fmt_diff(d_rew_b)} "
               "(paired bootstrap 95 %)")
    return out


# ---------------------------------------------------------------- the data sets bench/quality.py measures on
Split = tuple[Recorded, list[int], list[int], float, float]  # table, train rows, test rows, cost / latency scale


def router_arena(embed: Callable[[list[str]], np.ndarray], seed: int = 0, heldout: int = -1,
                 path: str = "routing/routerarena", text_stats: bool = False) -> Split:
    """RouterArena's two-model log (../shared/data/routing/routerarena, read in place, see its SOURCES.md):
    claude-3-haiku vs gemini-2.0-flash on 809 queries, verdict score >= 0.5, $ as recorded, family = the query's
    dataset prefix (the importer's family column), split as `python -m cluster.routing_log` splits it (a fifth
    held out, by seed), cost_scale = the priciest model's mean $ as the importer sets it."""
    import json

    from orchestra.data.loaders import resolve
    from orchestra.data.sources import split_tasks
    from orchestra.routing.estimator import TaskFeatures

    d = resolve(path)
    models = ("claude-3-haiku-20240307", "gemini-2.0-flash-001")  # answer-1 = the priciest, as the importer ranks
    rows = {m: {r["global_index"]: r for r in map(json.loads, (d / f"{m}.jsonl").read_text().splitlines())}
            for m in models}
    qids = list(rows[models[0]])
    tasks = [Task(id=q, category="qa", problem=rows[models[0]][q]["question"], answer="", data_source="routing_log",
                  meta={"family": q.rsplit("_", 1)[0]}) for q in qids]
    ok = np.array([[rows[m][q]["evaluation_result"]["score"] >= 0.5 for m in models] for q in qids], dtype=float)
    usd = np.array([[rows[m][q]["evaluation_result"]["inference_cost"] for m in models] for q in qids], dtype=float)
    n_held = len(qids) // 5 if heldout < 0 else heldout
    train, test = split_tasks(tasks, len(qids) - n_held, n_held, seed)
    feats = TaskFeatures(embed, ["family"], text_stats=text_stats).fit_vocab(train)
    pos = {t.id: i for i, t in enumerate(tasks)}
    plans = [Plan(f"answer-{i + 1}", (("answer", f"answer-{i + 1}"),)) for i in range(2)]
    rec = Recorded(tasks, plans, ok, usd, np.full(ok.shape, 2.0), feats(tasks), feats.n_meta,  # importer's 2 s
                   feats.n_stats)
    return rec, [pos[t.id] for t in train], [pos[t.id] for t in test], float(f"{usd[:, 0].mean():.3g}"), 10.0


def replay_zoo(cfg: Any, experts: dict[str, Any], embed: Callable[[list[str]], np.ndarray]) -> Split:
    """A replay experiment (e.g. mmlu_pro_replay) split as its runs split it (data.n_train / n_heldout, by seed; the
    training side with the `router.extra_tasks` the run's router is also fitted on):
    every answer tier's recorded verdict and $ (`experts`: tools.registry.build_experts(cfg.zoo), passed in since
    the core does not import tools/), latency the zoo's per-expert figure, features as the run's router builds them."""
    from orchestra.config import task_tiers
    from orchestra.data.sources import build_router_pool, build_task_set
    from orchestra.routing.estimator import TaskFeatures

    tiers = {t: e for t, e in task_tiers(cfg).items() if t.startswith("answer")}
    train, test, _ = build_task_set(cfg.data, tiers)
    if cfg.router.extra_tasks:  # the run's router is fitted on these too
        train = train + build_router_pool(cfg.data, cfg.router.extra_tasks, tiers)
    recs = {t: (experts[e], experts[e].records()) for t, e in tiers.items()}

    def qid(t: Task) -> str:
        return str(t.meta.get("question_id", t.id))

    tasks = [t for t in [*train, *test] if all(qid(t) in r for _, r in recs.values())]
    got = [[r[qid(t)] for _, r in recs.values()] for t in tasks]
    ok = np.array([[float(x.correct) for x in g] for g in got])
    usd = np.array([[e.priced(x)[2] for (e, _), x in zip(recs.values(), g, strict=True)] for g in got])
    lat = np.tile([float(cfg.zoo.experts[e].latency_s) for e in tiers.values()], (len(tasks), 1))
    feats = TaskFeatures(embed, list(cfg.router.meta_keys), text_stats=cfg.router.text_stats).fit_vocab(train)
    held = {t.id for t in test}
    rec = Recorded(tasks, [Plan(t, (("answer", t),)) for t in tiers], ok, usd, lat, feats(tasks), feats.n_meta,
                   feats.n_stats)
    return (rec, [i for i, t in enumerate(tasks) if t.id not in held], [i for i, t in enumerate(tasks) if t.id in held],
            float(cfg.reward.cost_scale), float(cfg.reward.latency_scale))


def replay_pair(cfg: Any, experts: dict[str, Any], embed: Callable[[list[str]], np.ndarray], strong: str, weak: str,
                families: Sequence[str], seed: int = 0, heldout: int = -1) -> Split:
    """A two-model log cut from a replay experiment (e.g. mmlu_pro_replay): the questions of `families` (MMLU-Pro:
    subjects) with both models' recorded verdicts and $, strong as answer-1, weak as answer-2; a quarter held out
    by seed (`heldout` > 0: that many); features the embedding alone, as a log with no metadata (RouteLLM's GSM8K
    log has none). RouterArena's log has its priciest model the less accurate; this one reads the usual way, so
    its APGR is RouteLLM's. `strong` / `weak` name experts of the replay zoo."""
    from orchestra.config import task_tiers
    from orchestra.data.sources import split_tasks, task_source
    from orchestra.routing.estimator import TaskFeatures

    by_expert = {e: t for t, e in task_tiers(cfg).items() if t.startswith("answer")}
    unknown = [m for m in (strong, weak) if m not in by_expert]
    if unknown or strong == weak:
        raise ValueError(f"pair: need two different experts of the zoo {cfg.zoo.name!r} ({sorted(by_expert)}), got "
                         f"strong={strong!r}, weak={weak!r}")
    source = str(cfg.data.source)
    tiers = {by_expert[m]: m for m in (strong, weak)}
    loaded, own_split, _ = task_source(source)(source, cfg.data, tiers)
    if own_split is not None:
        raise ValueError(f"pair: data.source must be a loaded replay set (loader:<name>:<path>, a task file), got "
                         f"{source!r}")
    wanted = {str(f) for f in families}
    tasks = [t for t in loaded if str(t.meta.get("family")) in wanted]
    recs = [experts[m].records() for m in (strong, weak)]
    tasks = [t for t in tasks if all(str(t.meta.get("question_id", t.id)) in r for r in recs)]
    if len(tasks) < 40:
        raise ValueError(f"pair: only {len(tasks)} questions of families {sorted(wanted)} carry both models' records")
    got = [[r[str(t.meta.get("question_id", t.id))] for r in recs] for t in tasks]
    ok = np.array([[float(x.correct) for x in g] for g in got])
    usd = np.array([[experts[m].priced(x)[2] for m, x in zip((strong, weak), g, strict=True)] for g in got])
    lat = np.tile([float(cfg.zoo.experts[m].latency_s) for m in (strong, weak)], (len(tasks), 1))
    n_held = len(tasks) // 4 if heldout < 0 else heldout
    train, test = split_tasks(tasks, len(tasks) - n_held, n_held, seed)
    feats = TaskFeatures(embed, text_stats=cfg.router.text_stats)
    pos = {t.id: i for i, t in enumerate(tasks)}
    plans = [Plan(f"answer-{i + 1}", (("answer", f"answer-{i + 1}"),)) for i in range(2)]
    rec = Recorded(tasks, plans, ok, usd, lat, feats(tasks), 0, feats.n_stats)
    return (rec, [pos[t.id] for t in train], [pos[t.id] for t in test], float(usd[:, 0].mean()),
            float(cfg.reward.latency_scale))
