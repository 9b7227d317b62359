"""`sft.teacher: random`: random tool and tier choices (orchestra/data/demos.py), teaching the format only. With
`sft.candidates` > 1 each demonstration is the best of k random episodes under the held-out score's own rubric
(scalar, the task's preference), in hindsight; with `sft.paired` every task is demonstrated under each vector of the
preference pairing (cluster/rollouts.paired_tasks)."""

from __future__ import annotations

from typing import Any

from cluster import launch
from cluster.rollouts import paired_tasks
from cluster.teachers import Teaching
from orchestra.data.demos import demo_samples
from orchestra.engine import eos_token_ids
from reward.score import score_episode


def demonstrations(teaching: Teaching) -> tuple[list[Any], dict[str, Any]]:
    c, r, tok = teaching.cfg, teaching.cfg.reward, teaching.tokenizer

    async def scorer(traj, task):  # used when sft.candidates > 1: the held-out score's own rubric
        return (await score_episode(traj, task, dict(r.judges), cost_scale=r.cost_scale,
                                    latency_scale=r.latency_scale, price_in=c.model.price_in_per_mtok,
                                    price_out=c.model.price_out_per_mtok))[3]

    tasks = teaching.tasks
    tasks = paired_tasks(tasks, c.data.preference_pairs, c.seed) if c.sft.paired else tasks
    samples = demo_samples(tasks, teaching.tools, tok, launch.prompter_kwargs(c), c.agent.loop_kwargs(),
                           eos_token_ids(tok), c.sft.demos, c.seed, c.sampling.max_tokens,
                           candidates=c.sft.candidates, scorer=scorer)
    return samples, {}
