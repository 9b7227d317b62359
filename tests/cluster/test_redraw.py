"""A finished run judged on another held-out draw (cluster/redraw.py): its records become the summary the verdict
reads (the policy's and the router's presets and sweep), and the verdict's lines and RESULT figures follow. The
evaluation itself is cluster/evaluate.py's (tested there); a whole redraw of a trained run is bench/seeds.py's."""

from __future__ import annotations

from cluster.redraw import evaluation, lines
from orchestra.eval.verdict import Goals, verdict
from orchestra.preferences import COST_ORDER, SWEEP_COSTS

POLICY = {"accuracy-first": 0.005, "balanced": 0.001, "cost-first": 0.0003}
ROUTER = {"accuracy-first": 0.0053, "balanced": 0.00075, "cost-first": 0.00038}


def records(policy: str, presets: dict[str, float], sweep: list[float]) -> list[dict]:
    out = [{"policy": policy, "preference": p, "task_id": f"t{i}", "cost_usd": c * k, "correct": k == 1}
           for p, c in presets.items() for i, k in enumerate((1, 1.5, 0.5))]  # three tasks: the mean is the preset's $
    out += [{"policy": policy, "preference": f"sweep:cost={w:g}", "task_id": "t0", "cost_usd": c, "correct": True}
            for w, c in zip(SWEEP_COSTS, sweep, strict=True)]
    return out


def test_records_become_the_summary_the_verdict_reads():
    recs = records("orchestrator", POLICY, [0.006, 0.0033, 0.0019, 0.0007, 0.00025]) + \
        records("estimator", ROUTER, [0.0066, 0.0036, 0.0022, 0.00074, 0.00026])
    mine, theirs = evaluation(recs, "orchestrator", list(COST_ORDER)), evaluation(recs, "estimator", list(COST_ORDER))
    assert abs(mine["by_pref"]["balanced"]["cost_usd"] - 0.001) < 1e-12 and mine["by_pref"]["balanced"]["episodes"] == 3
    # each task's $, which the verdict's per-step rule pairs across preferences
    assert mine["by_pref"]["balanced"]["task_usd"] == {"t0": 0.001, "t1": 0.0015, "t2": 0.0005}
    assert mine["sweep"]["points"][1]["task_usd"] == {"t0": 0.0033}
    assert [p["cost_weight"] for p in mine["sweep"]["points"]] == list(SWEEP_COSTS) and mine["sweep"]["adherence"] > 0.999
    summary = {"heldout_seed": None, "tasks": 3, "after_rl": {"by_pref": mine["by_pref"]}, "unseen_sweep": mine["sweep"],
               "router": {"by_pref": theirs["by_pref"], "sweep": theirs["sweep"]}}
    v = verdict(summary, Goals())
    summary["verdict"] = {"follows": v.follows, "judged": v.judged, "problems": v.problems}
    out = lines(summary)
    assert "RESULT redraw_follows_preference=1" in out and "RESULT redraw_pref_spread=16.6667" in out
    assert sum(line.startswith("INFO redraw (held-out draw None, 3 tasks) judged") for line in out) == 3
