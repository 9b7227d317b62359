"""The SFT warm start of a training run: random-choice demonstrations (orchestra/data/demos.py) played through
the run's own tool servers, then `sft.steps` learner updates on them with a decaying learning rate, after which
the learner's frozen reference becomes the warm-started policy (so KL anchors RL to it).

With `sft.candidates` > 1 each demonstration is the best of k random episodes under the held-out score's own
rubric (scalar, the task's preference); with `sft.paired` every task is demonstrated under each vector of the
preference pairing (cluster/rollouts.paired_tasks).
"""

from __future__ import annotations

from typing import Any

import ray

from actors.tool_server import RayToolClient
from cluster import launch
from cluster.rollouts import paired_tasks
from orchestra.data.demos import demo_samples, sft_batches, sft_lr
from orchestra.policy.models import load_tokenizer
from orchestra.policy.tokenizer import eos_token_ids
from orchestra.types import Task
from reward.score import score_episode


def warm_start(cfg: Any, learner: Any, tool_handles: dict[str, Any], tasks: list[Task], bars: Any,
               console: Any) -> dict[str, float]:
    c = cfg
    tok = load_tokenizer(c.model.name, tiny=c.model.tiny, cache_dir=c.model.cache_dir,
                         chat_template=c.model.chat_template)
    # Demonstrations go through the run's own tool servers: no second retriever index in the driver.
    tools = RayToolClient(tool_handles, timeout_s=c.zoo.server.timeout_s)
    r = c.reward

    async def scorer(traj, task):  # used when sft.candidates > 1: the held-out score's own rubric
        return (await score_episode(traj, task, dict(r.judges), cost_scale=r.cost_scale,
                                    latency_scale=r.latency_scale, price_in=c.model.price_in_per_mtok,
                                    price_out=c.model.price_out_per_mtok))[3]

    tasks = paired_tasks(tasks, c.data.preference_pairs, c.seed) if c.sft.paired else tasks
    samples = demo_samples(tasks, tools, tok, launch.prompter_kwargs(c), launch.agent_kwargs(c),
                           eos_token_ids(tok), c.sft.demos, c.seed, c.sampling.max_tokens,
                           candidates=c.sft.candidates, scorer=scorer)
    metrics: list[dict[str, Any]] = []
    bar = bars.add("SFT steps", c.sft.steps)
    for i, batch in enumerate(sft_batches(samples, c.sft.steps, c.sft.batch_size, c.seed)):
        metrics.append(ray.get(learner.sft_update.remote(batch, lr=sft_lr(c.sft, i))))
        bars.advance(bar)
        if (i + 1) % max(1, c.sft.steps // 5) == 0:
            console.print(f"  sft {i + 1}/{c.sft.steps}: loss {metrics[-1]['sft_loss']:.3f}")
    ray.get(learner.reset_reference.remote())  # KL anchors RL to the warm-started policy
    return {"sft_samples": len(samples), "sft_loss": metrics[-1]["sft_loss"] if metrics else float("nan")}
