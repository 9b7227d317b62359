"""RL's positive control (issue 51): does preference-paired GRPO teach the tiny policy to read what its experts say?

Usage: python bench/rl_control.py [seeds=2] [root=runs/rl_control] [window=10] [KEY=VALUE ...]  (other KEY=VALUEs
are passed to cluster.train as config overrides, e.g. algo.steps=60 algo.lr=2e-4)

Trains experiment=adaptive_control (conf/experiment/adaptive_control.yaml) once per seed: a warm start that consults
two cheap simulated experts and, under accuracy-first, escalates to gpt-5 at random (not on what they answered),
then GRPO paired over accuracy-first and balanced. From each run's held-out evaluations after SFT and after RL
(greedy, the same 200 tasks; cluster/heldout.py `escalation`) it prints per preset P(escalate | the two answers
disagree) and P(escalate | they agree) before and after RL, and the held-out reward's
change with a paired bootstrap 95 % interval (questions paired; the seeds' runs of a question averaged into one
draw, as the seeds share their held-out questions; orchestra/eval/stats.py). RESULT lines:
  rl_control_escalation_gain   under accuracy-first, the rise of P(esc | disagree) - P(esc | agree) through RL
                               (mean over seeds); the goal is >= 0.5
  rl_control_gain_ci_low       the low end of accuracy-first's reward-gain interval (goal: > 0)
  rl_control_gain_<preset>, escalation_disagree_<preset>, escalation_agree_<preset> (after RL), and _sft twins;
                               reask_disagree_<preset>: the part of escalation_disagree that asked a consulted
                               tier again (orchestra/eval/escalation.py), not a stronger one
  rl_control_policy_gap_first / _last   the policy's own mean P(esc | disagree) - mean P(esc | agree) at the
                               decision token over the first / last `window` training steps (logged log-probs)
It also prints what the training rollouts did (sampled at the training temperature, from the run's episode
records): P(escalate | disagree) and P(escalate | agree) per preset over the first and the last `window` RL steps,
with the mean advantage the escalations carried and the calls they made: where RL moved the policy, conditionally or
not; and where the held-out greedy policy's escalations went after RL (the tier: gpt-5 or a cheap re-ask).
A run dir that already holds a summary is read, not trained again (delete it to rerun).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from statistics import mean
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PRESETS = ("accuracy-first", "balanced", "cost-first")


def train(seed: int, run_dir: Path, overrides: list[str]) -> dict:
    summary = run_dir / "summary.json"
    if not summary.is_file():
        cmd = [sys.executable, "-m", "cluster.train", "experiment=adaptive_control", f"seed={seed}",
               f"run_dir={run_dir}", *overrides]
        print(f"INFO rl_control: {' '.join(cmd[2:])}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
    return json.loads(summary.read_text())


def rates(summary: dict, preset: str) -> tuple[float, float]:
    b = summary["by_pref"][preset]
    return float(b.get("escalation_disagree", float("nan"))), float(b.get("escalation_agree", float("nan")))


def reading_window(overrides: list[str]) -> dict[str, float]:
    """Is reading the best accuracy-first policy at all? Over the training tasks, each tier's correctness when the
    cascade's two consults agree and when they disagree (the zoo's own draws, as the episodes get them). Escalating
    exactly on disagreement beats both always submitting (a consulted answer) and always escalating iff the final
    call's reward cost c lies in (P(final | agree) - best P(consulted | agree), P(final | disagree) - best
    P(consulted | disagree)). RESULT rl_control_read_margin: the distance of c to the nearer end (> 0: reading is
    the optimum, by that much reward per decision; < 0: another policy is, and RL finding it is no failure)."""
    import asyncio
    import dataclasses

    from orchestra.agent.consults import agree
    from orchestra.cascade_names import parse
    from orchestra.config import load_config, task_tiers
    from orchestra.data.sources import build_task_set
    from orchestra.preferences import PRESETS
    from orchestra.types import ToolContext
    from reward.judges import judge, judge_for
    from reward.rubric import scalar_reward
    from tools.registry import build_tools, zoo_dict

    cfg = load_config(["experiment=adaptive_control", *overrides])
    train, _, _ = build_task_set(cfg.data, task_tiers(cfg))
    cascade = parse(cfg.sft.cascade)
    named = {t: f"{t} ({e})" for t, e in task_tiers(cfg).items()}
    tools = build_tools(zoo_dict(cfg.zoo), ["consult", "answer"])

    async def row(task) -> tuple[bool, list[bool], float]:
        ctx = ToolContext(task=dataclasses.replace(task, pref=PRESETS["accuracy-first"]))
        seen = [await tools["consult"].call({"model": t}, ctx) for t in cascade.consult]
        final = await tools["answer"].call({"model": cascade.final}, ctx)
        right = [(await judge(judge_for(task.data_source, cfg.reward.judges), r.candidate if i < 2 else r.answer,
                              task.answer, task.problem)).correct for i, r in enumerate([*seen, final])]
        return agree(seen[0].candidate, seen[1].candidate), right, final.cost_usd

    async def all_rows() -> list[tuple[bool, list[bool], float]]:
        return list(await asyncio.gather(*(row(t) for t in train)))

    rows = asyncio.run(all_rows())
    # the final call's $ as accuracy-first's reward counts it (the preset's scalar rubric: reward: scalar)
    c = -scalar_reward(False, mean(r[2] for r in rows), 0.0, {}, PRESETS["accuracy-first"],
                       cfg.reward.cost_scale).terms["cost"]
    ends = []
    for same in (True, False):
        part = [r[1] for r in rows if r[0] == same]
        if not part:
            print(f"INFO reading window: the two never {'agree' if same else 'disagree'} on the training tasks")
            return {}
        p = [mean(x[i] for x in part) for i in range(3)]
        ends.append(p[2] - max(p[0], p[1]))
        print(f"INFO reading window: {len(part)} tasks where {' and '.join(named[t] for t in cascade.consult)} "
              f"{'agree' if same else 'disagree'}: P(correct) {p[0]:.2f}, {p[1]:.2f}; {named[cascade.final]} "
              f"{p[2]:.2f}")
    print(f"INFO reading window: escalating exactly on disagreement is accuracy-first's best policy iff the final "
          f"call's reward cost lies in ({ends[0]:+.2f}, {ends[1]:+.2f}); it is {c:.2f} (reward.cost_scale)")
    return {"rl_control_read_margin": min(c - ends[0], ends[1] - c)}


def trajectories(recs: list[dict], preset: str) -> list[SimpleNamespace]:
    """The records played under `preset` as what orchestra.eval.escalation reads (tool records), with their
    advantages, steps and turns."""
    from orchestra.preferences import PRESETS, is_among
    from orchestra.types import ToolRecord, ToolResult

    return [SimpleNamespace(tool_records=[ToolRecord(**{**c, "result": ToolResult.from_dict(c["result"])})
                                          for c in r["tool_calls"]], adv=float(r["advantage"]),
                            step=int(r["step"]), turns=r.get("turns") or [])
            for r in recs if is_among(r["task"]["pref"], [PRESETS[preset]])]


def escalations(trajs: list[SimpleNamespace]) -> tuple[list[SimpleNamespace], str]:
    """The episodes whose third call was not a submit, and where they went (tool(tier), the 3 most common): RL can
    keep the decision and move its tier (a cheap tier's fresh answer instead of the final one)."""
    escs = [t for t in trajs if len(t.tool_records) >= 3 and t.tool_records[2].name != "submit"]
    to = Counter(f"{t.tool_records[2].name}({t.tool_records[2].tool_id})" for t in escs).most_common(3)
    return escs, ", ".join(f"{k} {n}" for k, n in to) or "-"


def sampled_rates(name: str, records: list[dict], window: int) -> None:
    """INFO lines: the training rollouts' escalation rates per preset over the first and the last `window` steps,
    and where the held-out greedy policy's escalations went after RL (records: a run's, `name` its dir's)."""
    from orchestra.eval.escalation import escalation
    from orchestra.preferences import PRESETS

    recs = [r for r in records if r.get("kind") == "train"]
    if not recs:
        return
    last = max(int(r["step"]) for r in recs)
    for part, lo, hi in (("first", 1, window), ("last", last - window + 1, last)):
        for preset in PRESETS:
            trajs = trajectories([r for r in recs if lo <= int(r["step"]) <= hi], preset)
            e = escalation(trajs)
            if not e:
                continue
            escs, to = escalations(trajs)
            adv = [t.adv for t in escs]
            print(f"INFO {name} sampled, {part} {window} steps ({lo}-{hi}), {preset}: P(esc|disagree) "
                  f"{e['escalation_disagree']:.2f} ({e['pairs_disagree']:.0f} pairs), P(esc|agree) "
                  f"{e['escalation_agree']:.2f} ({e['pairs_agree']:.0f}); escalations' mean advantage "
                  f"{mean(adv) if adv else float('nan'):+.2f}, to {to}")
    final = [r for r in records if r.get("kind") == "eval" and str(r.get("id", "")).startswith("eval-final-")]
    for preset in PRESETS:
        escs, to = escalations(trajectories(final, preset))
        if escs:
            print(f"INFO {name} held out after RL, {preset}: {len(escs)} escalations, to {to}")


def decision_probs(name: str, records: list[dict], window: int) -> dict[str, float]:
    """The policy's own P(escalate) at the decision, per context, from the training records' logged log-probs: far
    less noisy than sampled rates (each episode gives a probability, not a coin). The decision token is, per context
    (the two consults agree or not), the first position where the most common escalating and submitting replies of
    the third turn differ; an episode counts where its reply shares their prefix up to it. P(escalate) there is
    exp(logprob) for an escalation, 1 - exp(logprob) for a submit (the two tokens hold all the mass the policy puts
    there). INFO per `window` steps under accuracy-first; returns rl_control_policy_gap_first / _last: mean P(esc |
    disagree) - mean P(esc | agree) over the first and the last window."""
    import math

    from orchestra.eval.escalation import decision

    rows = []  # (step, agreed, escalated, response ids, logprobs) of accuracy-first's decision turns
    for t in trajectories([r for r in records if r.get("kind") == "train"], "accuracy-first"):
        if (d := decision(t)) is not None and len(t.turns) >= 3:
            rows.append((t.step, *d, tuple(t.turns[2]["response_ids"]), t.turns[2]["logprobs"]))
    probs: dict[tuple[int, bool], list[float]] = {}
    for same in (True, False):
        common = [Counter(ids for _, a, e, ids, _ in rows if a == same and e == esc).most_common(1) for esc in
                  (True, False)]
        if not all(common):
            continue
        esc_ids, sub_ids = common[0][0][0], common[1][0][0]
        i = next((k for k, (x, y) in enumerate(zip(esc_ids, sub_ids)) if x != y), None)
        if i is None:
            continue
        for step, a, esc, ids, lps in rows:
            if a == same and len(ids) > i and ids[:i] == esc_ids[:i]:
                p = math.exp(lps[i])
                probs.setdefault(((step - 1) // window, same), []).append(p if esc else 1 - p)
    windows = sorted({w for w, _ in probs})
    gaps = []
    for w in windows:
        d, a = probs.get((w, False)), probs.get((w, True))
        if not d or not a:
            continue
        gaps.append(mean(d) - mean(a))
        print(f"INFO {name} policy, steps {w * window + 1}-{w * window + window}, accuracy-first: mean "
              f"P(esc | disagree) {mean(d):.3f} ({len(d)}), mean P(esc | agree) {mean(a):.3f} ({len(a)}), "
              f"gap {gaps[-1]:+.3f}")
    return {"rl_control_policy_gap_first": gaps[0], "rl_control_policy_gap_last": gaps[-1]} if gaps else {}


def compare(runs: list[tuple[dict, dict]]) -> dict[str, float]:
    """Per preset, the held-out escalation rates and reward of each run's (before RL, after RL) evaluations
    (cluster/heldout.py summaries of the same greedy tasks): INFO lines, and the figures keyed as the RESULT lines
    (module docstring). Rewards are paired per (run, question), a question's runs averaged, a bootstrap 95 %
    interval over questions."""
    from orchestra.eval.stats import paired_bootstrap_diff

    out: dict[str, float] = {}
    for p in PRESETS:
        before = [rates(b, p) for b, _ in runs]
        after = [rates(a, p) for _, a in runs]
        # absent from summaries written before orchestra/eval/escalation.py counted re-asks
        reask = [a["by_pref"][p].get("reask_disagree") for _, a in runs]
        for s, (b, a) in enumerate(zip(before, after, strict=True)):
            print(f"INFO seed {s} {p}: P(esc|disagree) {b[0]:.3f} -> {a[0]:.3f}, P(esc|agree) {b[1]:.3f} -> {a[1]:.3f}"
                  + (f" (after RL, re-asking a consulted tier on disagreement: {reask[s]:.3f})"
                     if reask[s] is not None else ""))
        x, y, groups = [], [], []
        for b, a in runs:  # rewards paired per (seed, question)
            pre = {(e["task"]): e["reward"] for e in b["rewards"] if e["pref"] == p}
            post = {(e["task"]): e["reward"] for e in a["rewards"] if e["pref"] == p}
            for t in sorted(set(pre) & set(post)):
                x.append(post[t])
                y.append(pre[t])
                # the seeds share their held-out questions: a question's runs are one bootstrap draw, averaged
                # (pooled as separate draws, two seeds that agree would narrow the interval by ~1/sqrt(2))
                groups.append(t)
        gain = paired_bootstrap_diff(x, y, groups)
        print(f"INFO {p}: held-out reward after RL - after SFT {gain['diff']:+.4f} [{gain['lo']:+.4f}, "
              f"{gain['hi']:+.4f}] ({len(x)} question-runs, {gain['n']:.0f} questions)")
        key = p.replace("-", "_")
        out[f"rl_control_gain_{key}"] = gain["diff"]
        out[f"rl_control_gain_{key}_ci_low"] = gain["lo"]
        out[f"escalation_disagree_{key}"] = mean(a[0] for a in after)
        out[f"escalation_agree_{key}"] = mean(a[1] for a in after)
        if None not in reask:
            out[f"reask_disagree_{key}"] = mean(reask)
        out[f"escalation_disagree_{key}_sft"] = mean(b[0] for b in before)
        out[f"escalation_agree_{key}_sft"] = mean(b[1] for b in before)
        if p == "accuracy-first":
            out["rl_control_escalation_gain"] = mean((a[0] - a[1]) - (b[0] - b[1]) for a, b in zip(after, before))
            out["rl_control_gain_ci_low"] = gain["lo"]
    return out


def main(argv: list[str]) -> None:
    own = ("seeds", "root", "window")
    args = dict(a.split("=", 1) for a in argv if a.split("=", 1)[0] in own)
    overrides = [a for a in argv if a.split("=", 1)[0] not in own]
    root = Path(args.get("root", ROOT / "runs" / "rl_control"))
    out: dict[str, float] = reading_window(overrides)
    runs = [train(s, root / f"s{s}", overrides) for s in range(int(args.get("seeds", 2)))]
    from orchestra.rundir.records import read_records

    policy: list[dict[str, float]] = []
    for s in range(len(runs)):  # a run's records read once (tens of MB) for both readings
        records = read_records(root / f"s{s}")
        sampled_rates(f"s{s}", records, int(args.get("window", 10)))
        policy.append(decision_probs(f"s{s}", records, int(args.get("window", 10))))
    for k in ("rl_control_policy_gap_first", "rl_control_policy_gap_last"):
        if all(k in g for g in policy):
            out[k] = mean(g[k] for g in policy)
    out.update(compare([(r["after_sft"], r["after_rl"]) for r in runs]))
    for k, v in out.items():
        print(f"RESULT {k}={v:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
