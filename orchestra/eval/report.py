"""The evaluation report: report.json (meta, summary rows, `quality_*` figures), report.md and PNG plots."""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from orchestra.eval.baselines import BASELINES, FIXED_ROUTERS
from orchestra.eval.stats import on_frontier, summarize


def quality_figures(rows: list[dict[str, Any]], orchestrator: str = "orchestrator",
                    preference: str = "balanced") -> dict[str, float]:
    """The `quality_*` figures (DESIGN.md "Benchmarks") from summary rows. Degenerate policies do not pass:
    on_frontier also needs accuracy > 0 (never answering is free, and so trivially "on" the frontier), and
    monotone needs $ falling strictly along accuracy-first, balanced, cost-first; pref_spread is the ratio of
    the ends (accuracy-first $ / cost-first $). With the estimator router evaluated beside it: vs_estimator, the
    smallest orchestrator − estimator score difference over the presets both ran under; acc_first_gap,
    always-strongest's accuracy − the orchestrator's under accuracy-first, in points."""
    by = {(r["policy"], r["preference"]): r for r in rows}
    base = [r for r in rows if r["policy"] in BASELINES]
    orch = by.get((orchestrator, preference)) or next(r for r in rows if r["policy"] == orchestrator)
    strong = next((r for r in base if r["policy"] == "strongest"), None)
    out: dict[str, float] = {}
    if strong is not None:
        out["acc_gap"] = 100.0 * (strong["accuracy"] - orch["accuracy"])
        out["cost_ratio"] = orch["cost_cents"] / strong["cost_cents"] if strong["cost_cents"] > 0 else math.inf
    fixed = [(r["cost_cents"], r["accuracy"]) for r in base if r["policy"] in FIXED_ROUTERS]
    out["on_frontier"] = float(orch["accuracy"] > 0 and on_frontier((orch["cost_cents"], orch["accuracy"]), fixed))
    costs = [by[(orchestrator, p)]["cost_cents"] for p in ("accuracy-first", "balanced", "cost-first")
             if (orchestrator, p) in by]
    if len(costs) == 3:
        out["monotone"] = float(costs[0] > costs[1] > costs[2])
        # how far apart the presets' $ are: accuracy-first $ / cost-first $ (goal >= 3)
        out["pref_spread"] = costs[0] / costs[2] if costs[2] > 0 else (math.inf if costs[0] > 0 else 0.0)
    shared = [p for (pol, p) in by if pol == orchestrator and ("estimator", p) in by]
    if shared:
        out["vs_estimator"] = min(by[(orchestrator, p)]["score"] - by[("estimator", p)]["score"] for p in shared)
    if strong is not None and (orchestrator, "accuracy-first") in by:
        out["acc_first_gap"] = 100.0 * (strong["accuracy"] - by[(orchestrator, "accuracy-first")]["accuracy"])
    return out


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One row per (policy, preference); every figure with its 95 % interval [lo, hi] as computed (Wilson for
    accuracy, bootstrap for the rest: neither is symmetric, so no ±)."""
    lines = ["| policy | preference | n | accuracy [95 %] | cost (¢) [95 %] | latency (s) [95 %] | score [95 %] | top tools |",
             "|---|---|---:|---:|---:|---:|---:|---|"]

    def cell(r: dict[str, Any], key: str, fmt: str) -> str:
        return f"{r[key]:{fmt}} [{r[key + '_lo']:{fmt}}, {r[key + '_hi']:{fmt}}]"

    for r in rows:
        mix = ", ".join(f"{k} {v:.0%}" for k, v in sorted(r["tool_mix"].items(), key=lambda kv: -kv[1])[:3])
        lines.append(f"| {r['policy']} | {r['preference']} | {r['n']} | {cell(r, 'accuracy', '.3f')} "
                     f"| {cell(r, 'cost_cents', '.3f')} | {cell(r, 'latency_s', '.2f')} | {cell(r, 'score', '.3f')} "
                     f"| {mix} |")
    return "\n".join(lines) + "\n"


def write_report(records: list[dict[str, Any]], out_dir: str | Path, meta: dict[str, Any] | None = None,
                 plots: bool = True, catalogue: Collection[str] | None = None) -> dict[str, Any]:
    """report.json (meta incl. seeds, rows, quality figures), report.md, and PNG plots (routing_by_preset.png
    when a learned policy ran under two or more presets); returns the report. `catalogue`: the valid tool ids
    (orchestra.eval.tool_bands.catalogue_ids), the rest plotted as "invalid"."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = summarize(records)
    report: dict[str, Any] = {"meta": dict(meta or {}), "rows": rows}
    if any(r["policy"] == "orchestrator" for r in rows) and any(r["policy"] in BASELINES for r in rows):
        report["quality"] = quality_figures(rows)
    if any(r["policy"] == "estimator" for r in rows) and any(r["policy"] in BASELINES for r in rows):
        # the estimator router's own figures beside the orchestrator's (prefixed), or alone without one
        own = {k: v for k, v in quality_figures(rows, orchestrator="estimator").items() if k != "vs_estimator"}
        report.setdefault("quality", {}).update({f"estimator_{k}": v for k, v in own.items()})
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "report.md").write_text(markdown_table(rows))
    if plots:
        from orchestra.eval.plots import plot_pareto, plot_routing_by_preset, plot_tool_mix

        written = [plot_pareto(rows, out / "pareto.png"), plot_tool_mix(rows, out / "tool_mix.png", catalogue),
                   plot_routing_by_preset(rows, out / "routing_by_preset.png", catalogue)]
        report["plots"] = [str(p) for p in written if p is not None]
    return report
