"""RouteLLM's yardstick for an evaluation on a replay zoo (a routing log, MMLU-Pro replay): the evaluated
questions' recorded outcomes and $ through orchestra/eval/yardstick.py, for the estimator router and the learned
policies; `cluster.evaluate` and bench/quality.py print its `yardstick_*` figures. Definitions: docs/quality.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestra.config import task_tiers

USD_SWEEP = (0.0, *(10.0 ** (k / 4) for k in range(-12, 13)))  # the estimator's cost weights on the $ axis


def yardstick(cfg: Any, tasks: list, records: list[dict[str, Any]], routers: dict[str, Any], out: Path,
              plots: bool = True) -> dict[str, float]:
    """Replay zoos (a routing log, MMLU-Pro replay): orchestra/eval/yardstick.py on the evaluated questions'
    recorded outcomes; writes yardstick.json (+ yardstick.png) and returns its `yardstick_*` figures ({} on other
    zoos). Two models: the estimator router's curve over its score P̂(strong right) − P̂(weak right) (its threshold
    rule, orchestra/routing/router.py); more: its points over a fixed sweep of the cost weight, on $. Learned
    policies (orchestrator, base): one operating point per preference they ran under. $ are the recorded ones."""
    import json
    from dataclasses import replace

    import numpy as np

    from orchestra.eval import yardstick as ys
    from tools.registry import build_experts

    if not any(e.kind == "replay" for e in cfg.zoo.experts.values()):
        return {}
    experts, mapping = build_experts(cfg.zoo), task_tiers(cfg)
    tiers = [t for t in mapping if t.startswith("answer")]
    recs = {t: (experts[mapping[t]], experts[mapping[t]].records()) for t in tiers}
    got = {t.id: (t, [r.get(str(t.meta.get("question_id", t.id))) for _, r in recs.values()]) for t in tasks}
    got = {k: v for k, v in got.items() if all(x is not None for x in v[1])}  # a question some model lacks
    if not got:
        return {}
    rows = {k: i for i, k in enumerate(got)}
    correct = np.array([[float(x.correct) for x in v[1]] for v in got.values()])
    cost = np.array([[e.priced(x)[2] for (e, _), x in zip(recs.values(), v[1], strict=True)] for v in got.values()])
    col, two = {t: j for j, t in enumerate(tiers)}, len(tiers) == 2
    strong, cheap = ys.ends(correct, cost)
    router = getattr(routers.get("estimator"), "__self__", None)  # the EstimatorRouter behind its `script`
    scores, sweeps = {}, {}
    try:
        if router is not None and two:
            plans = router.single_call_plans([tiers[strong], tiers[cheap]])
            scores["estimator"] = [router.pick_single(t, plans, 0.0).margin for t, _ in got.values()]
        elif router is not None:
            plans = router.single_call_plans(tiers)
            picks = [[col[router.pick_single(replace(t, pref={"accuracy": 1.0, "cost": w, "latency": 0.0}),
                                             plans).tier] for t, _ in got.values()] for w in USD_SWEEP]
            sweeps["estimator"] = sorted({(float(cost[range(len(p)), p].mean()), float(correct[range(len(p)), p]
                                                                                       .mean())) for p in picks})
    except ValueError as e:  # the router has no single-call plan for some tier: no estimator curve
        print(f"INFO yardstick: no estimator curve ({e})")
    episodes = {p: [(r["preference"], rows[r["task_id"]], {col[k]: n for k, n in r["tool_counts"].items() if k in col},
                     bool(r["correct"])) for r in records if r["policy"] == p and r["task_id"] in rows]
                for p in ("orchestrator", "base")}
    policies = {p: ys.episode_points(eps, cost, strong if two else None) for p, eps in episodes.items() if eps}
    try:
        result = ys.log_yardstick(correct, cost, scores=scores, sweeps=sweeps, policies=policies)
    except ValueError as e:  # every model costs the same: no $ axis
        print(f"INFO yardstick: not computed ({e})")
        return {}
    curves = result["curves"]
    for name, c in curves.items():
        pts = ", ".join(f"({x:.3f}, {a:.3f})" for x, a in c.points())
        first = ", ".join(f"{g:.0%} {c.cpt_first(g):.3f}" for g in ys.GAPS)
        print(f"INFO yardstick {name} ({len(got)} questions; {result['axis']}, accuracy): {pts}; "
              f"{'rising' if c.monotone else 'not rising'}; smallest x recovering {first}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "yardstick.json").write_text(json.dumps(
        {"axis": result["axis"], "n_questions": len(got), "models": tiers, "strong": tiers[result["strong"]],
         "cheapest": tiers[result["cheapest"]], "figures": result["figures"], "operating_points": policies,
         "curves": {k: {"points": c.points(), **c.summary()} for k, c in curves.items()}}, indent=1))
    if plots:
        from orchestra.eval.plots import plot_yardstick

        names = (f"always {mapping[tiers[result['cheapest']]]}", f"always {mapping[tiers[result['strong']]]}")
        plot_yardstick(curves, out / "yardstick.png", result["axis"], names=names)
    return result["figures"]
