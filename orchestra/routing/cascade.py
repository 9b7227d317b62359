"""Adaptive plans (cascades): consult cheap experts, read what they answer, and escalate only when it says to.

One-shot plans (orchestra/routing/plans.py) fix every call before any expert speaks. A cascade decides on what the
experts answered, through the `consult` / `submit` tools (orchestra/agent/consults.py):

  pair       `a&b>c`   consult a and b; if their answers agree, submit a's; else answer with c
  no-answer  `a?>c`    consult a; if it gave no usable answer, answer with c; else submit a's
  three      `a&b>c>d` consult a and b; if they agree, submit a's; else consult c; if c agrees with a or b, submit
                       c's; else answer with d

Its outcome on a task follows from each tier's one-shot outcome there (its answer, right or wrong, $ and seconds):
`consult(k)` asks the same expert the same question as `answer(k)` and gets the same reply (replay zoos replay it;
the simulated zoo draws it from the same key), so `cascade_outcomes` computes every cascade's outcome offline from
the exploration table, and tests check that it equals the episode the agent loop plays (`choose`). Two answers agree
when they are equal after case, space and bracket folding ("(B)" = "b"); a missing answer agrees with nothing.
`evaluate` does the same for whole arrays of recorded outcomes (benchmarks over thousands of questions).
`hand_cascades(tiers, costs)`: every ordered pair of tiers (the cheaper consulted first) escalating to every tier
outside it, and every tier escalating on no answer to every pricier one. Which cascade suits a task under a
preference is the estimator's business (they are plans like any other there); the bench's: bench/cascades.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from orchestra.agent.consults import agree, fold
from orchestra.agent.parse import call_text
from orchestra.cascade_names import Cascade, describe, is_cascade, parse  # noqa: F401  the grammar, re-exported
from orchestra.routing.plans import Outcome, Plan


def decide(cascade: Cascade, answers: dict[str, str | None]) -> tuple[list[str], str, str]:
    """(tiers consulted, the tool that ends, its tier) given each tier's answer under `cascade`'s rule: 'submit'
    adopts the answer that tier gave, 'answer' calls it."""
    c = cascade.consult
    if cascade.kind == "no_answer":
        return ([c[0]], "submit", c[0]) if fold(answers.get(c[0])) is not None else ([c[0]], "answer", cascade.final)
    if agree(answers.get(c[0]), answers.get(c[1])):
        return [c[0], c[1]], "submit", c[0]
    if cascade.kind == "pair":
        return [c[0], c[1]], "answer", cascade.final
    if agree(answers.get(c[2]), answers.get(c[0])) or agree(answers.get(c[2]), answers.get(c[1])):
        return list(c), "submit", c[2]
    return list(c), "answer", cascade.final


def hand_cascades(tiers: Sequence[str], cost: dict[str, float]) -> list[Cascade]:
    """Every pair cascade (the cheaper of two tiers consulted first, escalating to any third tier) and every
    no-answer cascade (to any pricier tier): what a person would write by hand, all of it."""
    by_cost = sorted(tiers, key=lambda t: (cost.get(t, 0.0), t))
    out = []
    for i, a in enumerate(by_cost):
        for b in by_cost[i + 1:]:
            out += [Cascade("pair", (a, b), c) for c in by_cost if c not in (a, b)]
        out += [Cascade("no_answer", (a,), c) for c in by_cost[i + 1:]]
    return out


def frontier_cascades(outcomes: Sequence[Outcome], k: int = 8) -> list[Cascade]:
    """The hand cascades over the answer tiers of `outcomes` (one-shot plans named by their tier) that lie on the
    accuracy-vs-$ frontier of those tiers and cascades together, at most k spread along it: the adaptive plans worth
    an estimator's fit (one that some single tier beats on both counts is never the best choice in expectation)."""
    rows = table(outcomes)
    tiers = sorted({t for row in rows.values() for t in row})
    if len(tiers) < 2 or k <= 0:
        return []
    cost = {t: float(np.mean([row[t].cost_usd for row in rows.values() if t in row])) for t in tiers}
    points: list[tuple[float, float, Cascade | None]] = []
    for t in tiers:
        done = [row[t] for row in rows.values() if t in row]
        points.append((cost[t], float(np.mean([o.correct for o in done])), None))
    for c in hand_cascades(tiers, cost):
        done = [p.outcome for row in rows.values() if (p := play(c, row)) is not None]
        if done:
            points.append((float(np.mean([o.cost_usd for o in done])), float(np.mean([o.correct for o in done])), c))
    points.sort(key=lambda x: (x[0], -x[1]))
    front, best = [], -1.0
    for _cost, acc, c in points:
        if acc > best:
            best = acc
            if c is not None:
                front.append(c)
    step = max(1, -(-len(front) // k))
    return front[::-1][::step][:k]


def table(outcomes: Iterable[Outcome]) -> dict[str, dict[str, Outcome]]:
    """task id -> tier -> its one-shot outcome (plans named by their tier alone: `answer-2`)."""
    out: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        if "+" not in o.plan and "&" not in o.plan and ">" not in o.plan:
            out.setdefault(o.task_id, {})[o.plan] = o
    return out


@dataclass(frozen=True)
class Played:
    """A cascade's outcome on one task: the Outcome row, and whether it escalated (called `final`)."""

    outcome: Outcome
    escalated: bool
    agreed: bool | None  # pair and three cascades: whether the first two answers agreed


def play(cascade: Cascade, row: dict[str, Outcome]) -> Played | None:
    """The cascade on one task from its tiers' one-shot outcomes; None when a tier it needs was not explored."""
    answers = {t: o.answer for t, o in row.items()}
    consulted, tool, tier = decide(cascade, answers)
    calls = consulted + ([tier] if tool == "answer" else [])
    if any(t not in row for t in calls):
        return None
    end = row[tier]
    some = row[calls[0]]
    outcome = Outcome(some.task_id, cascade.name, bool(end.correct), sum(row[t].cost_usd for t in calls),
                      sum(row[t].latency_s for t in calls), some.seed, end.answer)
    agreed = None if cascade.kind == "no_answer" else agree(answers.get(consulted[0]), answers.get(consulted[1]))
    return Played(outcome, tool == "answer", agreed)


def cascade_outcomes(outcomes: Iterable[Outcome], cascades: Sequence[Cascade]) -> list[Outcome]:
    """Outcome rows of every cascade on every task whose needed tiers were explored."""
    rows = table(outcomes)
    return [p.outcome for c in cascades for row in rows.values() if (p := play(c, row)) is not None]


def choose(cascade: Cascade):
    """A scripted router for orchestra/agent/scripted.py: (turn, prompt text) -> the next call, reading the
    prompt's "Expert answers" section (orchestra/agent/prompt.py) as a policy would: the answers themselves."""

    def next_call(_turn: int, prompt: str) -> str:
        seen = _answers_in(prompt)
        for tier in cascade.consult:
            if tier not in seen:
                consulted, _, _ = decide(cascade, seen)
                if tier in consulted:
                    return call_text("consult", {"model": tier})
        _, tool, tier = decide(cascade, seen)
        return call_text(tool, {"model": tier})

    return next_call


def _answers_in(prompt: str) -> dict[str, str | None]:
    """tier -> answer from the last "Expert answers" section of a rendered prompt (orchestra/agent/prompt.py)."""
    at = prompt.rfind("Expert answers")
    if at < 0:
        return {}
    out: dict[str, str | None] = {}
    for line in prompt[prompt.index("\n", at) + 1:].split("\n"):
        tier, sep, answer = line.partition(": ")
        if not sep or " " in tier:
            break
        out[tier] = answer
    return out


def script_of(plan: Plan):
    """What a scripted engine plays for a plan: a cascade's rule (`choose`, it reads the answers), else the
    plan's fixed calls."""
    return choose(parse(plan.name)) if is_cascade(plan.name) else plan.texts()


def expected_calls(name: str, records: Sequence) -> list[list[str]]:
    """The [tool, tier] calls a plan makes in an episode whose tool records are `records`: a one-shot plan's
    are fixed (None here: the caller has them); a cascade's follow from what its consults answered there."""
    cascade = parse(name)
    seen = {r.tool_id: r.result.candidate for r in records if r.name == "consult" and r.result.ok}
    consulted, tool, tier = decide(cascade, seen)
    return [["consult", t] for t in consulted] + [[tool, tier]]


def as_plan(cascade: Cascade) -> Plan:
    """The cascade as a named plan for the estimator (its P(correct), $ and seconds are fitted like any plan's);
    `calls` lists every call it can make, and what it plays is `choose`'s, not `Plan.texts`."""
    calls = tuple(("consult", t) for t in cascade.consult) + (("answer", cascade.final),)
    return Plan(cascade.name, calls)


def answer_codes(answers: Sequence[Sequence[str | None]]) -> np.ndarray:
    """[tasks, tiers] integers: within a task, tiers whose answers agree share a code >= 0; no answer is -1."""
    out = np.full((len(answers), len(answers[0]) if answers else 0), -1, dtype=np.int64)
    for i, row in enumerate(answers):
        seen: dict[str, int] = {}
        for j, a in enumerate(row):
            f = fold(a)
            if f is not None:
                out[i, j] = seen.setdefault(f, len(seen))
    return out


def evaluate(cascade: Cascade, col: dict[str, int], codes: np.ndarray, correct: np.ndarray, cost: np.ndarray,
             latency: np.ndarray) -> dict[str, np.ndarray]:
    """Per task (rows of the [tasks, tiers] arrays; `col`: tier -> column) what the cascade does: correct, $,
    seconds, escalated (it called `final`) and agreed (the first two answers agreed; no-answer cascades: whether
    the first tier answered). `play` on one task gives the same."""
    k = [col[t] for t in cascade.consult]
    f = col[cascade.final]
    a = codes[:, k[0]]
    if cascade.kind == "no_answer":
        ok = a >= 0
        ends, spent = np.where(ok, k[0], f), cost[:, k[0]] + np.where(ok, 0.0, cost[:, f])
        took = latency[:, k[0]] + np.where(ok, 0.0, latency[:, f])
        agreed = ok
    else:
        b = codes[:, k[1]]
        agreed = (a >= 0) & (a == b)
        spent = cost[:, k[0]] + cost[:, k[1]]
        took = latency[:, k[0]] + latency[:, k[1]]
        if cascade.kind == "pair":
            ends = np.where(agreed, k[0], f)
            ok = agreed
        else:
            c = codes[:, k[2]]
            third = ~agreed
            backs = third & (c >= 0) & ((c == a) | (c == b))
            spent = spent + np.where(third, cost[:, k[2]], 0.0)
            took = took + np.where(third, latency[:, k[2]], 0.0)
            ends = np.where(agreed, k[0], np.where(backs, k[2], f))
            ok = agreed | backs
        spent = spent + np.where(ok, 0.0, cost[:, f])
        took = took + np.where(ok, 0.0, latency[:, f])
    rows = np.arange(len(codes))
    return {"correct": correct[rows, ends].astype(float), "cost": spent, "latency": took, "escalated": ~ok,
            "agreed": agreed}
