"""PNG plots: the Pareto frontier (accuracy vs $), the tool-call mix per policy, routing per preset, training curves.

- `plot_pareto(rows, path)`: one point per baseline and one per preference preset for the orchestrator
  (rows from orchestra.eval.stats.summarize), 95% CI bars, and the fixed routers' frontier as a dashed line.
- `plot_tool_mix(rows, path, catalogue)`: stacked bars of the share of calls per tier for each policy (as the
  ToolOrchestra paper's Figure 3).
- `plot_routing_by_preset(rows, path, catalogue)`: for each learned policy run under two or more presets, one
  stacked bar per preset (None, and no file, when no policy was).
- `plot_yardstick(curves, path, axis)`: RouteLLM's figure (orchestra/eval/yardstick.py): accuracy vs strong-model
  share (or vs $ between always-cheapest and always-strongest), one line per router with its APGR, the random
  and oracle lines, always-weak and always-strong as horizontal lines.
- `plot_training(metrics_jsonl_path, out_dir, catalogue)`: reward, accuracy and $ over steps (train rows;
  held-out eval rows as markers) and the rollout tool mix over steps, from orchestra.rundir.tracking's
  metrics.jsonl.
Every tool-mix chart draws the bands of orchestra/eval/tool_bands.py (tiers grouped by tool, ids outside the
`catalogue` of valid tool ids pooled as one grey "invalid" band): one colour map per tool, one shade per tier,
so no two bands share a colour. Legends sit outside the axes and files are saved with a tight bounding box,
so no entry is cut off. matplotlib is imported lazily with the non-interactive Agg backend; nothing here
computes statistics.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from orchestra.eval.baselines import BASELINES, FIXED_ROUTERS
from orchestra.eval.stats import frontier
from orchestra.eval.tool_bands import INVALID, Band, band_shares, tool_bands
from orchestra.rundir.tracking import read_metrics

# one sequential colour map per tiered tool (its tiers are shades of it); tools without tiers take the others
TOOL_CMAPS = {"search": "Blues", "enhance_reasoning": "Greens", "answer": "Oranges"}
OTHER_CMAPS = ("Purples", "Reds", "YlOrBr", "PuRd", "BuGn", "GnBu", "RdPu", "YlGn", "OrRd", "PuBu")
INVALID_COLOUR = "#9e9e9e"  # neutral grey: no tool map uses it


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(r: dict[str, Any]) -> str:
    # a baseline runs under one preset; a learned policy (orchestrator, estimator) under each: name it
    return r["policy"] if r["policy"] in BASELINES else f"{r['policy']} ({r['preference']})"


def band_colours(bands: list[Band]) -> list[Any]:
    """One RGBA colour per band: the family's colour map at a shade per tier (darkest for tier 1), grey for
    INVALID. Families beyond the colour maps reuse them at a lighter offset, so colours stay distinct."""
    import matplotlib

    others = [b.tool for b in bands if b.tool not in TOOL_CMAPS and b.tool != INVALID]
    others = list(dict.fromkeys(others))
    out = []
    for b in bands:
        if b.tool == INVALID:
            out.append(matplotlib.colors.to_rgba(INVALID_COLOUR))
            continue
        if b.tool in TOOL_CMAPS:
            name, offset = TOOL_CMAPS[b.tool], 0.0
        else:
            i = others.index(b.tool)
            name, offset = OTHER_CMAPS[i % len(OTHER_CMAPS)], 0.12 * (i // len(OTHER_CMAPS))
        level = 0.65 if b.shades == 1 else 0.95 - 0.6 * b.shade / (b.shades - 1)
        out.append(matplotlib.colormaps[name](max(level - offset, 0.1)))
    return out


def _band_label(b: Band) -> str:
    return f"invalid ({len(b.ids)} id{'s' * (len(b.ids) != 1)})" if b.tool == INVALID else b.label


def _stacked_bars(ax: Any, labels: list[str], mixes: list[dict[str, float]], bands: list[Band],
                  colours: list[Any]) -> None:
    bottom = [0.0] * len(mixes)
    shares = [band_shares(m, bands) for m in mixes]
    for i, (band, colour) in enumerate(zip(bands, colours, strict=True)):
        height = [s[i] for s in shares]
        ax.bar(range(len(mixes)), height, bottom=bottom, label=_band_label(band), color=colour,
               edgecolor="white", linewidth=0.4)
        bottom = [b + h for b, h in zip(bottom, height, strict=True)]
    ax.set_xticks(range(len(mixes)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.0)


def _outside_legend(ax: Any, title: str = "tool tier") -> None:
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, labels, fontsize=7, title=title, title_fontsize=8, bbox_to_anchor=(1.01, 1),
              loc="upper left", ncols=1 + len(labels) // 25)


# colour = preset, marker = policy: the named presets keep their colours across plots; any other vector (a sweep
# point, a user's own) takes one of a colormap's shades no preset uses; fixed routers ignore the preference: black
PRESET_COLOURS = {"accuracy-first": "tab:blue", "balanced": "tab:green", "cost-first": "tab:orange",
                  "latency-first": "tab:purple"}
POLICY_MARKERS = {"orchestrator": "*", "estimator": "D", "strongest": "^", "cheapest": "v", "random": "x",
                  "heuristic": "s", "oracle": "P"}
SPARE_MARKERS = ("o", "h", "p", "<", ">", "X", "d", "8")


def preset_colours(prefs: list[str]) -> dict[str, Any]:
    """One distinct colour per preference: the named presets' own, the rest from viridis."""
    import matplotlib

    others = [p for p in dict.fromkeys(prefs) if p not in PRESET_COLOURS]
    cmap = matplotlib.colormaps["viridis"]
    spare = {p: cmap(0.15 + 0.7 * i / max(len(others) - 1, 1)) for i, p in enumerate(others)}
    return {p: PRESET_COLOURS.get(p, spare.get(p)) for p in dict.fromkeys(prefs)}


def policy_markers(policies: list[str]) -> dict[str, str]:
    spare = iter(m for m in SPARE_MARKERS if m not in POLICY_MARKERS.values())
    return {p: POLICY_MARKERS.get(p) or next(spare, ".") for p in dict.fromkeys(policies)}


def pareto_figure(rows: list[dict[str, Any]]) -> Any:
    """Accuracy vs ¢ with CIs: marker = policy, colour = preset (fixed routers black), the fixed-router frontier
    dashed; two legends' worth of entries in one box, each entry once."""
    from matplotlib.lines import Line2D

    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    learned = [r for r in rows if r["policy"] not in BASELINES]
    colours = preset_colours([r["preference"] for r in learned])
    markers = policy_markers([r["policy"] for r in rows])
    for r in rows:
        colour = "black" if r["policy"] in BASELINES else colours[r["preference"]]
        m = markers[r["policy"]]
        ax.errorbar(r["cost_cents"], r["accuracy"], xerr=r.get("cost_cents_ci", 0), yerr=r.get("accuracy_ci", 0),
                    fmt=m, color=colour, markersize=10 if m == "*" else 6, capsize=3)
    handles = [Line2D([], [], linestyle="", marker=m, color="dimgrey", label=p) for p, m in markers.items()]
    handles += [Line2D([], [], linestyle="-", linewidth=4, color=c, label=p) for p, c in colours.items()]
    front = frontier([(r["cost_cents"], r["accuracy"]) for r in rows if r["policy"] in FIXED_ROUTERS])
    if len(front) > 1:
        ax.plot([c for c, _ in front], [a for _, a in front], "k--", linewidth=1)
        handles.append(Line2D([], [], color="k", linestyle="--", linewidth=1, label="fixed-router frontier"))
    ax.set_xlabel("mean cost per task (¢)")
    ax.set_ylabel("accuracy")
    ax.set_title("Accuracy vs cost (marker: policy; colour: preset; black: fixed routers)")
    ax.grid(alpha=0.3)
    ax.legend(handles=handles, fontsize=7, loc="best")
    return fig


def plot_pareto(rows: list[dict[str, Any]], path: str | Path) -> Path:
    return _save(_plt(), pareto_figure(rows), path)


def tool_mix_figure(rows: list[dict[str, Any]], catalogue: Collection[str] | None = None) -> Any:
    """The tool-mix bar chart as a matplotlib figure (plot_tool_mix saves it; tests read its legend)."""
    plt = _plt()
    bands = tool_bands((k for r in rows for k in r.get("tool_mix", {})), catalogue)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    _stacked_bars(ax, [_label(r) for r in rows], [r.get("tool_mix", {}) for r in rows], bands, band_colours(bands))
    ax.set_ylabel("share of tool calls")
    ax.set_title("Tool-call mix per policy")
    _outside_legend(ax)
    return fig


def plot_tool_mix(rows: list[dict[str, Any]], path: str | Path, catalogue: Collection[str] | None = None) -> Path:
    return _save(_plt(), tool_mix_figure(rows, catalogue), path)


def multi_preset(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The learned policies (not baselines) that ran under two or more presets, with their rows in order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["policy"] not in BASELINES:
            groups.setdefault(r["policy"], []).append(r)
    return {p: rs for p, rs in groups.items() if len({r["preference"] for r in rs}) >= 2}


def plot_routing_by_preset(rows: list[dict[str, Any]], path: str | Path,
                           catalogue: Collection[str] | None = None) -> Path | None:
    """routing_by_preset.png: per learned policy, the share of each tier under each preset; None (no file)
    when no policy ran under two presets."""
    groups = multi_preset(rows)
    if not groups:
        return None
    plt = _plt()
    bands = tool_bands((k for rs in groups.values() for r in rs for k in r.get("tool_mix", {})), catalogue)
    colours = band_colours(bands)
    width = max(3.0, 0.75 * max(len(rs) for rs in groups.values()) + 1.2)
    fig, axes = plt.subplots(1, len(groups), figsize=(width * len(groups) + 1.5, 4.2), sharey=True, squeeze=False)
    for ax, (policy, rs) in zip(axes[0], groups.items(), strict=True):
        _stacked_bars(ax, [r["preference"] for r in rs], [r.get("tool_mix", {}) for r in rs], bands, colours)
        ax.set_title(policy)
        ax.set_xlabel("preset")
    axes[0][0].set_ylabel("share of tool calls")
    _outside_legend(axes[0][-1])
    fig.suptitle("Routing under each preset")
    return _save(plt, fig, path)


def plot_yardstick(curves: dict[str, Any], path: str | Path, axis: str = "share",
                   names: tuple[str, str] = ("always-weak", "always-strong")) -> Path:
    """yardstick.png: each curve (x, accuracy, apgr; the `random` and `oracle` keys drawn as reference lines) as
    RouteLLM draws its routers (routellm/evals/evaluate.py): a line through the operating points, always-weak grey
    and always-strong red dashed across; x in percent of strong-model calls, or of the way from always-cheapest's
    $ to always-strongest's."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 5))
    pct = lambda xs: [100.0 * x for x in xs]  # noqa: E731  (RouteLLM's axis is in percent)
    routers = [n for n in curves if n not in ("random", "oracle")]
    palette = _distinct(len(routers), reserved=("C3", "C7"))  # red and grey mark always-strong and the oracle
    for name, c in curves.items():
        if name == "random":
            ax.plot(pct(c.x), c.accuracy, ":", color="k", linewidth=1, label="random (APGR 0.50)")
        elif name == "oracle":
            ax.plot(pct(c.x), c.accuracy, "-x", color="C7", linewidth=1, label=f"oracle (APGR {c.apgr:.2f})")
        else:
            ax.plot(pct(c.x), c.accuracy, "-o", markersize=3, color=palette[routers.index(name)],
                    label=f"{name} (APGR {c.apgr:.2f})")
    ref = next(iter(curves.values()))
    ax.axhline(ref.weak, color="grey", linestyle="--", linewidth=1, label=names[0])
    ax.axhline(ref.strong, color="red", linestyle="--", linewidth=1, label=names[1])
    ax.set_xlabel("strong-model calls (%)" if axis == "share" else
                  "$ per question (% of the way from always-cheapest to always-strongest)")
    ax.set_ylabel("accuracy")
    ax.set_title("Router performance (RouteLLM's yardstick)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _save(plt, fig, path)


def _distinct(n: int, reserved: tuple[str, ...] = ()) -> list[Any]:
    """n colours, none repeated and none in `reserved`: the default cycle's while it lasts, then viridis shades."""
    import matplotlib

    cycle = [f"C{i}" for i in range(10) if f"C{i}" not in reserved]
    if n <= len(cycle):
        return cycle[:n]
    cmap = matplotlib.colormaps["viridis"]
    return [cmap(i / max(n - 1, 1)) for i in range(n)]


def _save(plt: Any, fig: Any, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # tight: a legend outside the axes is kept whole
    plt.close(fig)
    return path


def _tool_mix(row: dict[str, Any]) -> dict[str, float]:
    if isinstance(row.get("tool_mix"), dict):
        return row["tool_mix"]
    for value in row.values():  # nested, e.g. reward_actor.tool_mix
        if isinstance(value, dict) and isinstance(value.get("tool_mix"), dict):
            return value["tool_mix"]
    return {}


def plot_training(metrics_jsonl_path: str | Path, out_dir: str | Path,
                  catalogue: Collection[str] | None = None) -> list[Path]:
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
        bands = tool_bands((k for _, m in mixes for k in m), catalogue)
        shares = [band_shares(m, bands) for _, m in mixes]
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.stackplot([s for s, _ in mixes], [[s[i] for s in shares] for i in range(len(bands))],
                     labels=[_band_label(b) for b in bands], colors=band_colours(bands))
        ax.set_xlabel("step")
        ax.set_ylabel("share of tool calls")
        ax.set_title("Tool mix over training")
        _outside_legend(ax)
        written.append(_save(plt, fig, out / "tool_mix_steps.png"))
    return written
