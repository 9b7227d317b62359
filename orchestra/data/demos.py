"""SFT demonstrations: teach the policy the tool-call *format*, not the routing.

Demonstrations are valid episodes whose tool choices are random over each task's catalogue (random tools,
random tiers, then `answer` with a random tier), played through the real agent loop and tools so prompts and
observations look exactly like RL's; each turn becomes a training sample and the learner minimises
cross-entropy on the demonstrated responses. Because the choices are uniform, the warm-started policy is a
format-correct *random* router: RL has to learn which tool and tier to use.

`candidates` k > 1 turns this into rejection sampling (as in rejection-sampling fine-tuning): each
demonstration plays k random episodes of its task and keeps the one with the best scalar reward under the
task's own preference (judged, priced, ties to the earlier). The warm start then already leans toward
routes that pay off on the training tasks, in hindsight; RL still has to learn what can be known up front.
`scripted_samples` plays given scripts instead (one per task: the expected-value teacher's routes,
orchestra/routing/teacher.py), rare labels repeated (`label_repeats`, sft.label_balance). `sft_batches` /
`sft_lr` cut the demonstrations into the SFT steps and give each step's learning rate; running them on the learner
is cluster/trainer.py's job.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from orchestra.agent.loop import AgentLoop, ToolClient, episode_samples
from orchestra.agent.prompt import Prompter
from orchestra.agent.scripted import noted, random_episode, script_engine
from orchestra.engine import Sampling
from orchestra.types import Task, TrainSample, Trajectory

Scorer = Callable[[Trajectory, Task], Awaitable[float]]


async def _demos(tasks: list[Task], tools: ToolClient, tokenizer: Any, prompter_kwargs: dict[str, Any],
                 agent_kwargs: dict[str, Any], eos_ids: list[int], n: int, seed: int, max_tokens: int,
                 candidates: int = 1, scorer: Scorer | None = None) -> list[Any]:
    rng = random.Random(f"sft:{seed}")
    prompter = Prompter(tokenizer, **prompter_kwargs)
    samples: list[Any] = []

    async def play(i: int, k: int, task: Task, script: list[str]) -> Trajectory:
        loop = AgentLoop(script_engine(tokenizer, script, eos_ids[0]), tools, prompter, eos_token_ids=eos_ids,
                         **agent_kwargs)
        return await loop.run(task, Sampling(max_tokens=max_tokens), uid=f"sft-{i}-{k}")

    async def one(i: int) -> list[Any]:
        task, choice_rng = tasks[i % len(tasks)], random.Random(rng.random())  # drawn before any await: same order
        warm = getattr(tools, "aschemas", None)  # remote catalogues: fetch without blocking the event loop
        schemas = await warm(task) if warm is not None else tools.schemas(task)
        scripts = [random_episode(task, schemas, choice_rng) for _ in range(candidates)]
        trajs = await asyncio.gather(*(play(i, k, task, s) for k, s in enumerate(scripts)))
        traj = trajs[0]
        if len(trajs) > 1 and scorer is not None:
            scores = await asyncio.gather(*(scorer(t, task) for t in trajs))
            traj = trajs[max(range(len(trajs)), key=lambda k: (scores[k], -k))]
        return [s for s, turn in zip(episode_samples(traj), traj.turns) if turn.format_ok]

    for start in range(0, n, 64):
        for part in await asyncio.gather(*(one(i) for i in range(start, min(n, start + 64)))):
            samples.extend(part)
    return samples


def demo_samples(tasks: list[Task], tools: ToolClient, tokenizer: Any, prompter_kwargs: dict[str, Any],
                 agent_kwargs: dict[str, Any], eos_ids: list[int], n: int, seed: int,
                 max_tokens: int = 96, candidates: int = 1, scorer: Scorer | None = None) -> list[Any]:
    """`n` random-choice demonstration episodes -> training samples (orchestra.types.TrainSample); with
    `candidates` > 1, each the best of that many under `scorer` (needed then)."""
    if not tasks:
        raise ValueError("SFT needs at least one task")
    if candidates > 1 and scorer is None:
        raise ValueError("rejection-sampled demonstrations (candidates > 1) need a scorer")
    return asyncio.run(_demos(tasks, tools, tokenizer, prompter_kwargs, agent_kwargs, eos_ids, n, seed, max_tokens,
                              candidates, scorer))


Script = list[str] | Callable[[int, str], str]  # fixed call texts, or a rule (turn, prompt text) -> the next call


def scripted_trajectories(episodes: list[tuple[Task, Script]], tools: ToolClient, tokenizer: Any,
                          prompter_kwargs: dict[str, Any], agent_kwargs: dict[str, Any], eos_ids: list[int],
                          max_tokens: int = 96, concurrency: int = 64, note: Callable[[str], str] | None = None
                          ) -> list[Trajectory]:
    """Each (task, script) played once through the agent loop, in order; with `note`, every call opens with
    note(prompt text) (sft.restate_preference: orchestra/agent/prompt.preference_note)."""
    prompter = Prompter(tokenizer, **prompter_kwargs)

    async def run() -> list[Trajectory]:
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int, task: Task, script: Script) -> Trajectory:
            async with sem:
                loop = AgentLoop(script_engine(tokenizer, noted(script, note) if note else script, eos_ids[0]),
                                 tools, prompter, eos_token_ids=eos_ids, **agent_kwargs)
                return await loop.run(task, Sampling(max_tokens=max_tokens), uid=f"sft-{i}")

        return list(await asyncio.gather(*(one(i, t, s) for i, (t, s) in enumerate(episodes))))

    return asyncio.run(run())


def scripted_samples(episodes: list[tuple[Task, Script]], tools: ToolClient, tokenizer: Any,
                     prompter_kwargs: dict[str, Any], agent_kwargs: dict[str, Any], eos_ids: list[int],
                     max_tokens: int = 96, concurrency: int = 64, repeats: Sequence[int] | None = None,
                     note: Callable[[str], str] | None = None, note_weight: float = 1.0) -> list[Any]:
    """Each (task, script) played once through the agent loop (`scripted_trajectories`, `note` before every call)
    -> its well-formed turns as samples, episode i's `repeats[i]` times (`label_repeats`; default once), each note's
    tokens weighing `note_weight` in the loss (`weight_notes`)."""
    if not episodes:
        raise ValueError("SFT needs at least one demonstration")
    counts = list(repeats) if repeats is not None else [1] * len(episodes)
    if len(counts) != len(episodes):
        raise ValueError(f"scripted_samples: {len(counts)} repeat counts for {len(episodes)} episodes")
    trajs = scripted_trajectories(episodes, tools, tokenizer, prompter_kwargs, agent_kwargs, eos_ids, max_tokens,
                                  concurrency, note)
    cut = [turn for traj in trajs for turn in traj.turns if turn.finish_reason == "length"]
    if cut:  # a demonstration cut short would teach a call that never closes, or silently drop out of SFT
        raise ValueError(f"{len(cut)} demonstrated calls are longer than sampling.max_tokens={max_tokens} (e.g. "
                         f"{cut[0].text[:120]!r}...): raise sampling.max_tokens")
    parts = [[s for s, turn in zip(episode_samples(traj), traj.turns) if turn.format_ok] for traj in trajs]
    if note_weight != 1.0:
        parts = [weight_notes(part, tokenizer, note_weight) for part in parts]
        if note is not None and not any(m == note_weight for part in parts for s in part for m in s.response_mask):
            raise ValueError(f"sft.note_weight={note_weight:g}: no demonstrated call holds a note between "
                             f"{THINK[0]!r} and {THINK[1]!r} as this tokenizer encodes them; nothing to weigh")
    return [s for part, k in zip(parts, counts, strict=True) for s in part * k]


THINK = ("<think>", "</think>")


def weight_notes(samples: list[TrainSample], tokenizer: Any, weight: float) -> list[TrainSample]:
    """`samples` with the tokens inside each think block of their responses weighing `weight` in SFT's loss (their
    response_mask; the learner takes the weighted mean): a note's bin word is one token of a call's thirty, and
    weighted alike a small policy may never learn to read it from the prompt (sft.note_weight). The think tags are
    found as the tokenizer encodes them; tool and observation tokens (mask 0) stay out of the loss."""
    opening, closing = (list(tokenizer.encode(t, add_special_tokens=False)) for t in THINK)

    def at(ids: list[int], j: int, tag: list[int]) -> bool:
        return ids[j:j + len(tag)] == tag

    out = []
    for s in samples:
        ids, mask, j, inside = list(s.response_ids), list(s.response_mask), 0, False
        while j < len(ids):
            if inside and at(ids, j, closing):
                inside, j = False, j + len(closing)
            elif not inside and at(ids, j, opening) and mask[j] > 0:
                inside, j = True, j + len(opening)
            else:
                if inside and mask[j] > 0:
                    mask[j] = weight
                j += 1
        out.append(replace(s, response_mask=mask))
    return out


def label_repeats(labels: Sequence[str], threshold: float) -> list[int]:
    """How many times each demonstration enters an SFT epoch, by its label (the teacher's plan): repeat-factor
    sampling (Gupta et al., LVIS, 2019), max(1, sqrt(threshold / f)) rounded, f being the label's share of all
    labels. A plan the teacher picks rarely (MMLU-Pro: llama-3.1-70b on ~5 % of questions) is otherwise never
    learned: the tiny policy copied every route hint but that one (docs/quality.md). threshold 0: once each."""
    if threshold <= 0:
        return [1] * len(labels)
    share = {k: v / len(labels) for k, v in Counter(labels).items()}
    return [max(1, round(math.sqrt(threshold / share[k]))) for k in labels]


def sft_batches(samples: list[Any], steps: int, batch_size: int, seed: int) -> list[list[Any]]:
    """Shuffled epochs of the demonstrations cut into `steps` batches (deterministic)."""
    rng = random.Random(f"sft-batches:{seed}")
    order: list[int] = []
    batches = []
    for _ in range(steps):
        if len(order) < batch_size:
            epoch = list(range(len(samples)))
            rng.shuffle(epoch)
            order += epoch
        batches.append([samples[j] for j in order[:batch_size]])
        del order[:batch_size]
    return batches


def sft_lr(cfg: Any, step: int, total: int | None = None) -> float:
    """Linear decay from cfg.lr to cfg.lr x cfg.min_lr_ratio over cfg.steps, or over `total` steps when SFT may
    run on that long (`sft.until_agreement`; step counts from 0): the late, small steps let the policy settle on
    the demonstrations' choice *distribution* (uniform tiers) instead of ending on the last batches' noise."""
    frac = min(1.0, step / max(1, (total or cfg.steps) - 1))
    return cfg.lr * (1.0 - (1.0 - cfg.min_lr_ratio) * frac)
