"""The verdict a training run ends with: did the policy come out following its user's preference, and if not, in
which phase was it lost and what to try. Pure functions of the run's summary (cluster/trainer.py writes it), so
`make train`, bench/seeds.py, SFT's own check (cluster/heldout.train_check) and the tests read one rule.

The rule is a *shape*, judged against what the run's own estimator router does on the same tasks and weights (the
router the warm start was taught by: a goal its own teacher cannot reach is neither demanded nor reported as a
failure). Two curves of mean $ per episode, each ordered by rising cost weight:
- the presets accuracy-first, balanced, cost-first (trained vectors), and
- the unseen sweep (orchestra/eval/adherence.py: cost weights 0.03 ... 3 at accuracy 1, latency 0; vectors, and
  with agent.preference_numbers numbers, no training rendered).
No step of a curve may rise (where the router's rises, the policy's may rise by `share` of that). Each step's fall
of $ on the log scale, ln($ before / $ after), must reach `share` (1/3) of its router's fall over the same step,
unless the policy already spends no more than its router at the step's end. And from the curve's first point to
each point after its first step, the fall must reach `share` of its router's. Each of these fails only where the
upper end of its paired 95% interval (the same tasks at both points, orchestra/eval/stats.paired_log_fall) does
(SFT's check may judge the falls by their estimates instead: `Goals.by_estimate`, sft.check_falls). So
a flat stretch fails wherever it lies (one route at two weights: an interval of zero width; rank-only adherence let a
flat middle through, a cumulative rule alone a flat top), a step a 64-task sample cannot tell from a third of its
router's is not failed on noise, a router that sends two presets to the same model asks no fall there, and a policy
that reaches its cheapest route a step before its router is not asked to fall below it. Besides, accuracy-first
must spend at least `min_spread` times what cost-first spends (`pref_spread`), asked only where the router itself
spreads that far. Without router figures (a run whose teacher fitted none) each step must fall strictly (a step
from $0 to $0 excepted: nothing is left to fall) and, for the sweep, −Spearman(weight, $) must reach
`min_adherence`. Without per-task $ (a summary older than the per-step rule) a step is judged by its estimate. A
figure that is nan (not measured where it should be, a $ of nan) fails; `judged` lists every figure the verdict
read, with its goal.
The share was fixed before any run of issue 69's recipe. The rule was first per step; it became cumulative after one
development run on the old held-out draw (seed 0) failed a policy that spent 0.030 ¢ at cost weight 1 where its
router spent 0.074, and could not then fall a third of the router's last step. The per-step rule came back, with
that case excused by the router's own $ at the step's end, after seed 4 of draw 69 at 70852cd passed the
cumulative rule with one route for its three highest weights; judged by its estimate it then failed seeds 0 and 4
retrained under it on draw 69 by 0.03 and 0.10 on the log scale at one step of sweeps that fell at every step
(docs/recipe.md), hence the interval. Rises and the falls from the first point were still judged by their
estimates until a routing log's run (mmlu_pro_replay seed 0, draw 69, at 4a1bef6) failed SFT's check five times on
a 1 % rise (95 % up to +0.02) where its router was flat, by a policy that copied its route hint on every training
task; SFT then ran to its cap (1,684 s of 2,079). Draw 69 served that development: the reported draw is now 1207.

Where the policy does not follow, the phase is named by the same figures after the warm start: it already failed
(lost in SFT), or RL undid a warm start that passed (lost in RL). An SFT that stopped at `sft.max_steps` below its
goal (sft.until_agreement, sft.until_follows; its last check failed, the last step included) fails on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestra.preferences import COST_ORDER

# a goal met exactly is met: scipy's Spearman of 0.9 is 0.8999999999999999, ln(a / b) - ln(a / b) need not be 0
TOLERANCE = 1e-9


@dataclass(frozen=True)
class Goals:
    min_spread: float = 3.0
    min_adherence: float = 0.9  # the sweep, where the run has no router figures to judge its steps against
    share: float = 1 / 3  # of the router's log-fall of $, at every step of a curve
    # falls judged by their estimates, not the upper ends of their intervals (SFT's check under sft.check_falls:
    # estimate); rises are judged by their intervals either way
    by_estimate: bool = False

    def reach(self, estimate: float, upper: float) -> float:
        """What a fall is judged by: its estimate (`by_estimate`) or the upper end of its 95% interval."""
        return estimate if self.by_estimate else upper

    def spread_ok(self, spread: float) -> bool:
        return spread >= self.min_spread - TOLERANCE  # nan fails

    def adherence_ok(self, adherence: float) -> bool:
        return adherence >= self.min_adherence - TOLERANCE


def goals_of(cfg: Any) -> Goals:
    t = cfg.train
    return Goals(t.min_pref_spread, t.min_unseen_adherence, t.min_router_share)


def log_fall(before: float, after: float) -> float:
    """ln(before / after): > 0 where $ fell; 0 where both are 0; nan where either is nan or negative."""
    if not (before >= 0 and after >= 0):  # nan and negatives
        return float("nan")
    if before == after:
        return 0.0
    if after == 0:
        return math.inf
    return -math.inf if before == 0 else math.log(before / after)


@dataclass
class Curve:
    """One judged curve: the policy's $ per point, its router's (None: no router figures), the points' labels."""

    name: str
    labels: list[str]
    policy: list[float]
    router: list[float] | None = None
    tasks: list[dict[str, float]] | None = None  # the policy's $ per task id at each point (None: means only)

    def fall(self, i: int, j: int) -> tuple[float, float]:
        """(estimate, upper end of its 95% interval) of ln($ at point i / $ at point j): paired over the tasks both
        points played (orchestra/eval/stats.paired_log_fall) where the curve has per-task $, else the estimate twice."""
        from orchestra.eval.stats import paired_log_fall

        est = log_fall(self.policy[i], self.policy[j])
        if not self.tasks or len(self.tasks) != len(self.policy):
            return est, est
        return est, paired_log_fall(self.tasks[i], self.tasks[j])[2]

    def step_falls(self) -> list[tuple[float, float]]:
        """(estimate, upper end of its 95% interval) of each step's ln($ fall)."""
        return [self.fall(i, i + 1) for i in range(len(self.policy) - 1)]


def step_problems(c: Curve, goals: Goals) -> tuple[list[str], str]:
    """(a line per failing step or point, the figure as judged) of one curve: with router figures, no step rises
    (unless the router's does: then by at most `share` of its rise), each step falls `share` of the router's step
    within its interval (or ends at or below the router's $), and from the curve's first point to each point after
    its first step the fall is at least `share` of the router's; without, $ falls strictly at every step ($0 to $0
    excepted)."""
    shown = " · ".join(f"{100 * x:.4f}" for x in c.policy)
    if c.router is None:
        steps = [log_fall(a, b) for a, b in zip(c.policy, c.policy[1:])]
        # a step from $0 to $0 passes: nothing is left to fall (a nan fails)
        floor = [x == 0 and y == 0 for x, y in zip(c.policy, c.policy[1:])]
        bad = [f"{c.name}: from {a} to {b} $ falls {f:.2f} on the log scale, goal > 0 (no router figures: strictly "
               "falling)" for a, b, f, z in zip(c.labels, c.labels[1:], steps, floor) if not (f > 0 or z)]
        return bad, (f"{c.name}: $ {shown} ¢; ln($ fall) per step " + " · ".join(f"{f:.2f}" for f in steps)
                     + " (each > 0, or $0 to $0: no router figures, strictly falling)")
    r_steps = [log_fall(a, b) for a, b in zip(c.router, c.router[1:])]
    falls = c.step_falls()
    upto = [f" (95% up to {hi:.2f})" if c.tasks else "" for _, hi in falls]
    # a step may rise only where the router's rises (a nan on either side fails). Every rule below fails a step
    # only where its whole paired 95% interval is on the wrong side: 64 tasks cannot fail a policy on noise (a rise
    # of 1 % where the router is flat did, on a routing log whose policy copied its route hint on every task), and
    # a flat stretch (one route at both weights) has an interval of zero width, so it fails wherever it lies
    allowed = [r if math.isnan(r) else min(0.0, goals.share * r) for r in r_steps]
    bad = [f"{c.name}: from {a} to {b} $ rises ({f:.2f} on the log scale{u}; its router's {r:.2f})"
           for a, b, (f, hi), u, n, r in zip(c.labels, c.labels[1:], falls, upto, allowed, r_steps)
           if not hi >= n - TOLERANCE]
    # each step falls at least `share` of its router's step, unless the policy already spends no more than its
    # router at the step's end (it is not asked to fall below its teacher)
    short = [r > 0 and not (goals.reach(f, hi) >= goals.share * r - TOLERANCE or pb <= rb)
             for (f, hi), r, pb, rb in zip(falls, r_steps, c.policy[1:], c.router[1:])]
    bad += [f"{c.name}: from {a} to {b} $ falls {f:.2f} on the log scale{u}, goal >= {goals.share * r:.2f} "
            f"({goals.share:.2g} of its router's step {r:.2f}) or at most its router's {100 * rb:.4f} ¢ there"
            for a, b, (f, _), u, r, rb, s in zip(c.labels, c.labels[1:], falls, upto, r_steps, c.router[1:], short)
            if s]
    # and the whole way from the first point to each point after its first step (that step is judged above): a
    # policy that starts below its router and stays flat there fails
    fell = [c.fall(0, j) for j in range(2, len(c.policy))]
    r_fell = [log_fall(c.router[0], x) for x in c.router[2:]]
    bad += [f"{c.name}: from {c.labels[0]} to {b} $ falls {f:.2f} on the log scale"
            + (f" (95% up to {hi:.2f})" if c.tasks else "") + f", goal >= {goals.share * r:.2f} "
            f"({goals.share:.2g} of its router's {r:.2f})" for b, (f, hi), r in zip(c.labels[2:], fell, r_fell)
            if not goals.reach(f, hi) >= goals.share * r - TOLERANCE]
    span = " ... ".join(dict.fromkeys([c.labels[2], c.labels[-1]])) if len(c.labels) > 2 else "-"
    line = (f"{c.name}: $ {shown} ¢; ln($ fall) per step " + " · ".join(
        f"{f:.2f}" + (f" (to {hi:.2f})" if c.tasks else "") for f, hi in falls)
            + f" (each >= {goals.share:.2g} x its router's " + " · ".join(f"{r:.2f}" for r in r_steps)
            + (" by its estimate," if goals.by_estimate else ", within its 95% interval," if c.tasks else "")
            + " or at most its router's $ there; none rising "
            f"where its router's does not), from {c.labels[0]} to {span} "
            + " · ".join(f"{f:.2f}" + (f" (to {hi:.2f})" if c.tasks else "") for f, hi in fell)
            + f" (each >= {goals.share:.2g} x its router's " + " · ".join(f"{r:.2f}" for r in r_fell) + ")")
    return bad, line


def preset_curve(figures: dict[str, Any], router: dict[str, Any] | None) -> Curve | None:
    """The presets' curve from an evaluation summary's `by_pref` (None without the three cost-ordered presets)."""
    by = figures.get("by_pref") or {}
    if not all(p in by for p in COST_ORDER):
        return None
    rb = (router or {}).get("by_pref") or {}
    return Curve("presets", list(COST_ORDER), [float(by[p]["cost_usd"]) for p in COST_ORDER],
                 [float(rb[p]["cost_usd"]) for p in COST_ORDER] if all(p in rb for p in COST_ORDER) else None,
                 per_task([by[p] for p in COST_ORDER]))


def sweep_curve(sweep: dict[str, Any] | None, router_sweep: dict[str, Any] | None,
                name: str = "unseen sweep") -> Curve | None:
    """The unseen sweep's curve (None when it was not run); the router's only where it ran the same weights."""
    points = sorted((sweep or {}).get("points") or [], key=lambda p: p["cost_weight"])
    if not points:
        return None
    weights = [p["cost_weight"] for p in points]
    rp = sorted((router_sweep or {}).get("points") or [], key=lambda p: p["cost_weight"])
    router = [float(p["cost_usd"]) for p in rp] if [p["cost_weight"] for p in rp] == weights else None
    return Curve(name, [f"cost {w:g}" for w in weights], [float(p["cost_usd"]) for p in points], router,
                 per_task(points))


def per_task(points: list[dict[str, Any]]) -> list[dict[str, float]] | None:
    """Each point's $ per task id (`task_usd`, cluster/heldout.py writes it), or None where a point has none (a
    summary written before issue 69's per-step rule): the steps are then judged by their estimates alone."""
    found = [p.get("task_usd") for p in points]
    return [{str(k): float(v) for k, v in t.items()} for t in found] if all(found) else None


def problems(presets: Curve | None, sweep: Curve | None, goals: Goals, adherence: float | None = None
             ) -> tuple[list[str], list[str]]:
    """(what fails, what was judged: one line per figure with its value and goal)."""
    out, judged = [], []
    if presets is not None:
        spread = presets.policy[0] / presets.policy[-1] if presets.policy[-1] > 0 else (
            math.inf if presets.policy[0] > 0 else float("nan"))
        r_spread = (presets.router[0] / presets.router[-1] if presets.router and presets.router[-1] > 0
                    else math.inf if presets.router else None)
        if r_spread is not None and r_spread < goals.min_spread:
            judged.append(f"pref_spread {spread:.2f}x: not asked (its router spreads {r_spread:.2f}x, under the "
                          f"goal {goals.min_spread:g}x)")
            if math.isnan(spread):
                out.append("accuracy-first and cost-first $ are nan")
        else:
            judged.append(f"pref_spread {spread:.2f}x (goal >= {goals.min_spread:g}x"
                          + (f"; its router {r_spread:.2f}x)" if r_spread is not None else ")"))
            if not goals.spread_ok(spread):
                out.append(f"accuracy-first spends {spread:.2f}x what cost-first spends (goal >= {goals.min_spread:g}x)")
        bad, line = step_problems(presets, goals)
        out += bad
        judged.append(line)
    if sweep is not None:
        bad, line = step_problems(sweep, goals)
        out += bad
        judged.append(line)
        if sweep.router is None:  # no router to judge the steps against: rank adherence too, as before issue 69
            shown = "nan" if adherence is None or math.isnan(adherence) else f"{adherence:.2f}"
            judged.append(f"{sweep.name} adherence {shown} (goal >= {goals.min_adherence:g})")
            if adherence is None or not goals.adherence_ok(adherence):
                out.append(f"along the {sweep.name}, $ follows the cost weight with adherence {shown} "
                           f"(goal >= {goals.min_adherence:g})")
    return out, judged


@dataclass
class Verdict:
    follows: bool | None  # None: the run measured none of the figures (no cost-ordered presets, no sweep)
    lost_in: str = ""  # "sft" | "rl" | "" (follows, or no verdict)
    problems: list[str] = field(default_factory=list)  # what fails after RL, one line each
    sft_short: str = ""  # SFT ended at its step cap below its goal: the line saying so
    judged: list[str] = field(default_factory=list)  # every figure read, with its value and goal

    @property
    def ok(self) -> bool:
        """No failure: follows (or nothing to judge) and an SFT that reached its goal."""
        return self.follows is not False and not self.sft_short


def sft_shortfall(summary: dict[str, Any], max_steps: int) -> str:
    """The line for an SFT that ran to `max_steps` and whose last check (cluster/heldout.train_check, run at the last
    step too) did not pass ("" otherwise); an SFT with a goal that recorded no check is short of it too."""
    if not max_steps:
        return ""
    checks = summary.get("sft_agreement_checks") or []
    if not checks:
        return "SFT has a goal (sft.until_agreement / sft.until_follows) but recorded no check of it"
    if checks[-1].get("passed", False):
        return ""
    return (f"SFT stopped at {summary.get('sft_steps_done', checks[-1].get('step', 0))} steps (sft.max_steps="
            f"{max_steps}) below its goal, as checked at step {checks[-1].get('step', '?')}: {checks[-1].get('below', '')}")


def curves(summary: dict[str, Any], phase: str) -> tuple[Curve | None, Curve | None, float | None]:
    """The presets' and the sweep's curves, and the sweep's adherence, of `phase` ("rl": after RL, "sft")."""
    router = summary.get("router") or {}
    if phase == "rl":
        figures, sweep, adherence = summary.get("after_rl") or {}, summary.get("unseen_sweep"), \
            (summary.get("unseen_sweep") or {}).get("adherence")
    else:
        figures, sweep, adherence = summary.get("after_sft") or {}, summary.get("sft_unseen_sweep"), \
            summary.get("sft_unseen_adherence")
    # unseen vectors whose prompts read like trained ones (bin words): named so (cluster/heldout.sweep_read_as_trained)
    seen = int(summary.get("heldout_sweep_read_as_trained") or 0)
    name = f"sweep ({seen} points read as trained prompts)" if seen else "unseen sweep"
    return preset_curve(figures, router), sweep_curve(sweep, router.get("sweep"), name), adherence


def verdict(summary: dict[str, Any], goals: Goals, sft_max_steps: int = 0) -> Verdict:
    """The run's verdict from its summary (after_sft, after_rl, unseen_sweep, router with its sweep, sft_* figures)."""
    presets, sweep, adherence = curves(summary, "rl")
    short = sft_shortfall(summary, sft_max_steps)
    if presets is None and sweep is None:
        return Verdict(None, sft_short=short)
    found, judged = problems(presets, sweep, goals, adherence)
    if not found:
        return Verdict(True, sft_short=short, judged=judged)
    before_p, before_s, before_a = curves(summary, "sft")
    # the warm start's own figures name the phase: it failed already (SFT), or it passed what was measured of it (RL);
    # none measured (no after-SFT evaluation in the summary): not named
    if before_p is None and before_s is None:
        lost = ""
    else:
        lost = "sft" if problems(before_p, before_s, goals, before_a)[0] else "rl"
    return Verdict(False, lost, found, short, judged)


ADVICE = {
    "sft": ("the warm start already gave the presets {same}: SFT did not teach the policy to read its preference. "
            "Try more SFT steps (sft.steps), SFT that checks the policy and goes on until it follows "
            "(sft.until_follows with sft.max_steps), more fresh starts where a check fails (sft.starts), or a lower "
            "sft.lr; check the teacher's labels differ per preset (the 'teacher, <preset>:' lines)."),
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
        lines.append(f"{v.sft_short}; raise sft.max_steps, sft.starts or sft.lr, or read docs/recipe.md on the warm "
                     "start.")
    return lines


def sft_goal(cfg: Any) -> int:
    """SFT's step cap where it checks the policy before stopping (sft.until_agreement with route hints,
    sft.until_follows), else 0: no goal to fall short of."""
    s = cfg.sft
    return s.max_steps if (s.until_agreement and cfg.agent.route_hints) or s.until_follows else 0


def ladder_curve(by_pref: dict[str, float], router: dict[str, float] | None, names: Sequence[str],
                 tasks: dict[str, dict[str, float]] | None = None) -> Curve:
    """SFT's check's cost ladder as a curve (cluster/sft_check.train_check): `by_pref` and `router` map each of
    `names` (the ladder's vector names, by rising weight) to a mean $, `tasks` each to the policy's $ per task."""
    return Curve("cost ladder", list(names), [by_pref.get(n, float("nan")) for n in names],
                 [router.get(n, float("nan")) for n in names] if router else None,
                 [tasks.get(n, {}) for n in names] if tasks else None)
