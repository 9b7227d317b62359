"""PNG plots: the Pareto frontier (accuracy vs $), the tool-call mix per policy, and training curves.

- `plot_pareto(rows, path)`: one point per baseline and one per preference preset for the orchestrator
  (rows from orchestra.eval.stats.summarize), 95% CI bars, and the fixed routers' frontier as a dashed line.
- `plot_tool_mix(rows, path)`: stacked bars of the share of calls per tool id for each policy (as the
  ToolOrchestra paper's Figure 3).
- `plot_training(metrics_jsonl_path, out_dir)`: reward, accuracy and $ over steps (train rows; held-out
  eval rows as markers) and the rollout tool mix over steps, from orchestra.rundir.tracking's metrics.jsonl.
matplotlib is imported lazily with the non-interactive Agg backend; nothing here computes statistics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestra.eval.baselines import BASELINES, FIXED_ROUTERS
from orchestra.eval.stats import frontier
from orchestra.rundir.tracking import read_metrics


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(r: dict[str, Any]) -> str:
    return r["policy"] if r["policy"] != "orchestrator" else f"orchestrator ({r['preference']})"


def plot_pareto(rows: list[dict[str, Any]], path: str | Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    base = [r for r in rows if r["policy"] in BASELINES]
    others = [r for r in rows if r["policy"] not in BASELINES]
    for group, marker in ((base, "o"), (others, "*")):
        for r in group:
            ax.errorbar(r["cost_cents"], r["accuracy"], xerr=r.get("cost_cents_ci", 0), yerr=r.get("accuracy_ci", 0),
                        fmt=marker, markersize=10 if marker == "*" else 6, capsize=3, label=_label(r))
    front = frontier([(r["cost_cents"], r["accuracy"]) for r in base if r["policy"] in FIXED_ROUTERS])
    if len(front) > 1:
        ax.plot([c for c, _ in front], [a for _, a in front], "k--", linewidth=1, label="fixed-router frontier")
    ax.set_xlabel("mean cost per task (¢)")
    ax.set_ylabel("accuracy")
    ax.set_title("Accuracy vs cost")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(plt, fig, path)


def plot_tool_mix(rows: list[dict[str, Any]], path: str | Path) -> Path:
    plt = _plt()
    tools = sorted({k for r in rows for k in r.get("tool_mix", {})})
    labels = [_label(r) for r in rows]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    bottom = [0.0] * len(rows)
    cmap = plt.get_cmap("tab20")
    for i, tool in enumerate(tools):
        share = [r.get("tool_mix", {}).get(tool, 0.0) for r in rows]
        ax.bar(range(len(rows)), share, bottom=bottom, label=tool, color=cmap(i % 20))
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("share of tool calls")
    ax.set_title("Tool-call mix per policy")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    return _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _tool_mix(row: dict[str, Any]) -> dict[str, float]:
    if isinstance(row.get("tool_mix"), dict):
        return row["tool_mix"]
    for value in row.values():  # nested, e.g. reward_actor.tool_mix
        if isinstance(value, dict) and isinstance(value.get("tool_mix"), dict):
            return value["tool_mix"]
    return {}


def plot_training(metrics_jsonl_path: str | Path, out_dir: str | Path) -> list[Path]:
    """training.png (reward / accuracy / $ per step) and tool_mix_steps.png; returns the files written."""
    plt = _plt()
    rows = read_metrics(metrics_jsonl_path)
    train = [r for r in rows if r.get("kind", "train") == "train"]
    evals = [(r["step"], r["heldout"]) for r in rows if isinstance(r.get("heldout"), dict)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, title in zip(axes, ("reward", "accuracy", "cost_usd"), ("reward", "accuracy", "$ per episode"),
                              strict=True):
        pts = [(r["step"], r[key]) for r in train if isinstance(r.get(key), (int, float))]
        if pts:
            ax.plot([s for s, _ in pts], [v for _, v in pts], "-o", markersize=3, label="rollouts")
        ekey = "score" if key == "reward" else key
        epts = [(s, h[ekey]) for s, h in evals if isinstance(h.get(ekey), (int, float))]
        if epts:
            ax.plot([s for s, _ in epts], [v for _, v in epts], "s", color="C3", label="held-out")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    written.append(_save(plt, fig, out / "training.png"))

    mixes = [(r["step"], _tool_mix(r)) for r in train]
    mixes = [(s, m) for s, m in mixes if m]
    if mixes:
        tools = sorted({k for _, m in mixes for k in m})
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.stackplot([s for s, _ in mixes], [[m.get(t, 0.0) for _, m in mixes] for t in tools], labels=tools,
                     colors=[plt.get_cmap("tab20")(i % 20) for i in range(len(tools))])
        ax.set_xlabel("step")
        ax.set_ylabel("share of tool calls")
        ax.set_title("Tool mix over training")
        ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
        written.append(_save(plt, fig, out / "tool_mix_steps.png"))
    return written
