"""The verdict a training run ends with: did the policy come out following its user's preference, and if not, in
which phase was it lost and what to try. Pure functions of the run's summary (cluster/trainer.py writes it), so
`make train`, bench/seeds.py and the tests read one rule.

A policy *follows its preference* on the held-out tasks when, under the trained presets accuracy-first, balanced
and cost-first, its $ falls strictly in that order (`monotone`), accuracy-first spends at least `min_spread` times
what cost-first spends (`pref_spread`), and under the adherence sweep, cost weights no training used, $ falls with
the weight (`unseen_adherence`, −Spearman, at least `min_adherence`). Where it does not, the phase is named by the
same figures taken after the warm start: the warm start already gave one behaviour to every preset (lost in SFT),
or RL undid a warm start that followed it (lost in RL). An SFT that stopped at `sft.max_steps` below its agreement
goal (`sft.until_agreement`, `sft.until_follows`) is a failure of its own: the warm start is not what the recipe
promises, whatever the figures after RL say.
A run without the three presets (or without the sweep) gets no verdict on what it did not measure: `checked` says
which figures the verdict rests on, never a pass for a figure that is absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Goals:
    min_spread: float = 3.0
    min_adherence: float = 0.9

    def spread_ok(self, spread: float) -> bool:
        return spread >= self.min_spread - TOLERANCE  # nan fails

    def adherence_ok(self, adherence: float) -> bool:
        return adherence >= self.min_adherence - TOLERANCE


# a Spearman that is 0.9 exactly (five sweep points, one tie) comes out of scipy as 0.8999999999999999
TOLERANCE = 1e-9


@dataclass
class Verdict:
    follows: bool | None  # None: the run measured none of the figures (no cost-ordered presets)
    lost_in: str = ""  # "sft" | "rl" | "" (follows, or no verdict)
    problems: list[str] = field(default_factory=list)  # what fails after RL, one line each
    sft_short: str = ""  # SFT ended at its step cap below its goal: the line saying so
    checked: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No failure: follows (or nothing to judge) and an SFT that reached its goal."""
        return self.follows is not False and not self.sft_short


def problems(figures: dict[str, Any], adherence: float | None, goals: Goals) -> tuple[list[str], list[str]]:
    """(what fails, what was checked) of one evaluation's summary (`pref_spread`, `monotone`) and an unseen-sweep
    adherence (None: not measured)."""
    out, checked = [], []
    spread, monotone = figures.get("pref_spread"), figures.get("monotone")
    if spread is not None:
        checked.append("pref_spread")
        if not goals.spread_ok(spread):
            out.append(f"accuracy-first spends {spread:.2f}x what cost-first spends (goal >= {goals.min_spread:g}x)")
    if monotone is not None:
        checked.append("monotone")
        if monotone < 1:
            out.append("$ does not fall strictly from accuracy-first to balanced to cost-first")
    if adherence is not None:
        checked.append("unseen_adherence")
        if not goals.adherence_ok(adherence):
            shown = "nan (one $ for every cost weight)" if math.isnan(adherence) else f"{adherence:.2f}"
            out.append(f"under cost weights never trained on, $ follows the weight with adherence {shown} "
                       f"(goal >= {goals.min_adherence:g})")
    return out, checked


def sft_shortfall(summary: dict[str, Any], max_steps: int) -> str:
    """The line for an SFT that ran to `max_steps` and whose last check (cluster/heldout.train_check) did not pass
    ("" otherwise, or where SFT checked nothing)."""
    checks = summary.get("sft_agreement_checks") or []
    if not checks or not max_steps or summary.get("sft_steps_done", 0) < max_steps or checks[-1].get("passed", True):
        return ""
    return f"SFT stopped at sft.max_steps={max_steps} below its goal: {checks[-1].get('below', '')}"


def verdict(summary: dict[str, Any], goals: Goals, sft_max_steps: int = 0) -> Verdict:
    """The run's verdict from its summary (after_sft, after_rl, unseen_sweep, sft_* figures)."""
    rl = summary.get("after_rl") or {}
    sweep = summary.get("unseen_sweep") or {}
    adherence = sweep.get("adherence") if sweep else None
    found, checked = problems(rl, adherence, goals)
    short = sft_shortfall(summary, sft_max_steps)
    if not checked:
        return Verdict(None, sft_short=short)
    if not found:
        return Verdict(True, sft_short=short, checked=checked)
    sft = summary.get("after_sft") or {}
    # the warm start's own figures name the phase: it failed already (SFT), or it passed what was measured of it (RL);
    # none measured (no after-SFT evaluation in the summary): not named
    before, sft_checked = problems(sft, summary.get("sft_unseen_adherence"), goals)
    lost = "sft" if before else ("rl" if sft_checked else "")
    return Verdict(False, lost, found, short, checked)


ADVICE = {
    "sft": ("the warm start already gave the presets {same}: SFT did not teach the policy to read its preference. "
            "Try more SFT steps (sft.steps), SFT that checks the policy and goes on until it follows "
            "(sft.until_follows with sft.max_steps), or a lower sft.lr; check the teacher's labels differ per "
            "preset (the 'teacher, <preset>:' lines)."),
    "rl": ("the warm start followed the preference and RL undid it: the same command with algo.steps=0 and a new "
           "run_dir (python -m cluster.sft) rebuilds that warm start. Try a lower algo.lr, a larger algo.kl_coef, fewer "
           "algo.steps, or preference-balanced advantages (algo.balance_prefs)."),
}


def report(v: Verdict, summary: dict[str, Any]) -> list[str]:
    """The warning block's lines ([] when the run is ok)."""
    if v.ok:
        return []
    lines = []
    if v.follows is False:
        sft = summary.get("after_sft") or {}
        same = (f"$ {sft.get('pref_spread', float('nan')):.2f}x apart" if "pref_spread" in sft else "one behaviour")
        lines.append("the trained policy does not follow its preference on the held-out tasks:")
        lines += [f"  - {p}" for p in v.problems]
        if v.lost_in:
            lines.append(f"  lost in {'the warm start (SFT)' if v.lost_in == 'sft' else 'RL'}: "
                         + ADVICE[v.lost_in].format(same=same))
        else:
            lines.append("  where it was lost is not known: the summary holds no evaluation after the warm start")
    if v.sft_short:
        lines.append(f"{v.sft_short}; raise sft.max_steps or sft.lr, or read docs/quality.md on the warm start.")
    return lines


def sft_goal(cfg: Any) -> int:
    """SFT's step cap where it checks the policy before stopping (sft.until_agreement with route hints,
    sft.until_follows), else 0: no goal to fall short of."""
    s = cfg.sft
    return s.max_steps if (s.until_agreement and cfg.agent.route_hints) or s.until_follows else 0
