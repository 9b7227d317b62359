"""`sft.teacher: cascade`: every task demonstrates `sft.cascade`'s two consults, then escalates with probability
`sft.escalate_share` whatever the experts answered (a warm start that consults but does not read what they say:
RL's positive control must learn to escalate on disagreement, bench/rl_control.py), or, with
`sft.escalate_on=disagree`, follows the cascade's own rule (it reads the answers)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from cluster import launch
from cluster.rollouts import paired_tasks
from cluster.teachers import Teaching, note
from orchestra.data.demos import Script, scripted_samples
from orchestra.engine import eos_token_ids
from orchestra.types import Task


def cascade_episodes(cfg: Any, train: list[Task]) -> tuple[list[tuple[Task, Script]], int, int]:
    """`sft.teacher: cascade`'s demonstrations: each task under each vector of the preference pairing consults the
    cascade's two tiers, then, under the `sft.escalate_under` vectors, (sft.escalate_on=random) escalates to its
    final tier with probability `sft.escalate_share` (seeded per task and vector), whatever the two answered, else
    submits the first answer: consulting without reading; or (escalate_on=disagree) reads: the cascade's own rule
    (escalate exactly when the two answers disagree, orchestra/routing/cascade.py `choose`, which reads them from the
    prompt as a policy would). Under the other vectors it submits. -> (episodes, escalated, reading)."""
    from orchestra.agent.scripted import call_text
    from orchestra.preferences import is_among, parse_preference
    from orchestra.routing.cascade import choose, parse

    c = cfg
    cascade = parse(c.sft.cascade)
    a, b = cascade.consult
    under = [parse_preference(v) for v in c.sft.escalate_under]
    episodes: list[tuple[Task, Script]] = []
    escalated = read = 0
    for i, task in enumerate(paired_tasks(train, c.data.preference_pairs, c.seed)):
        escalates = is_among(task.pref, under)
        script: Script
        if escalates and c.sft.escalate_on == "disagree":
            read += 1
            script = choose(cascade)
        else:
            esc = escalates and random.Random(f"cascade:{c.seed}:{i}:{task.id}").random() < c.sft.escalate_share
            escalated += esc
            last = call_text("answer", {"model": cascade.final}) if esc else call_text("submit", {"model": a})
            script = [call_text("consult", {"model": a}), call_text("consult", {"model": b}), last]
        episodes.append((task, _restating(script) if c.sft.restate else script))
    return episodes, escalated, read


def _restating(script: Script) -> Callable[[int, str], str]:
    """`script` whose calls, once the prompt shows two or more answers, open with their restatement (sft.restate)."""
    from orchestra.agent.parse import parse
    from orchestra.agent.prompt import restatement
    from orchestra.agent.scripted import as_rule

    rule = as_rule(script)

    def noted(turn: int, prompt: str) -> str:
        call = rule(turn, prompt)
        return restatement(prompt, parse(call).calls[0].name) + call

    return noted


def demonstrations(teaching: Teaching) -> tuple[list[Any], dict[str, Any]]:
    """The cascade teacher's demonstrations (`cascade_episodes`) played through the agent loop -> SFT samples."""
    c, tok = teaching.cfg, teaching.tokenizer
    episodes, escalated, read = cascade_episodes(c, teaching.tasks)
    samples = scripted_samples(episodes, teaching.tools, tok, launch.prompter_kwargs(c), c.agent.loop_kwargs(),
                               eos_token_ids(tok), c.sampling.max_tokens, note=note(c),
                               note_weight=c.sft.note_weight)
    n = max(len(episodes), 1)
    how = (f"following its rule on {read} (under {', '.join(c.sft.escalate_under)}), submitting on the rest" if read
           else f"escalating on {escalated} ({escalated / n:.0%}, whatever the experts answered)")
    teaching.console.print(f"  cascade teacher: {len(episodes)} demonstrations of {c.sft.cascade}, {how} -> {len(samples)} "
                    "samples")
    return samples, {"teacher_cascade": c.sft.cascade, "teacher_escalated": escalated / n, "teacher_reading": read / n}
