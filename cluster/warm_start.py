"""The SFT warm start of a training run: demonstrations played through the run's own tool servers, then
`sft.steps` learner updates on them with a decaying learning rate, after which the learner's frozen reference
becomes the warm-started policy (so KL anchors RL to it). Where the demonstrations' routes come from is the teacher
(`sft.teacher`), one module of cluster/teachers/ each: random (random tool and tier choices, best of k in
hindsight), expected_value (exploration -> the run's learned routers, saved in `<run_dir>/router/` -> the plan a
cross-fitted estimator rates best per task and preference vector), cascade (a cascade's consults, escalating at a set
rate: RL's positive control).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from actors.tool_client import RayToolClient
from cluster import launch
from cluster.teachers import Teaching, teacher
from orchestra.agent.call_cache import CallCache
from orchestra.data.demos import sft_batches, sft_lr
from orchestra.policy.models import config_tokenizer
from orchestra.types import Task

SAMPLES_FILE = "sft_samples.pkl"  # sft.save_samples


def warm_start(cfg: Any, learner: Any, tools: Any, tasks: list[Task], bars: Any,
               console: Any, check: Callable[[int], dict[str, float]] | None = None) -> dict[str, Any]:
    """Demonstrations played through `tools` (a ToolClient over the run's own tool servers: no second retriever
    index in the driver; `scripted_tools` makes one), then the SFT steps (`sft_loop`; `check`: the trainer's check of
    the policy on training tasks, used where the config asks for one: `sft_checks`)."""
    c = cfg
    tok = config_tokenizer(c.model)
    samples, report = teacher(c.sft.teacher)(Teaching(c, tools, tok, tasks, bars, console))
    if isinstance(tools, CallCache):
        console.print(f"  {tools.line()}")
        report.update(tool_calls_asked=tools.calls, tool_calls_made=tools.made)
    if c.sft.save_samples:  # bench/sft_lab.py replays SFT on exactly these, outside Ray, on any device
        import pickle

        Path(c.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(c.run_dir) / SAMPLES_FILE).write_bytes(pickle.dumps(samples))
    loop = sft_loop(c.sft, lambda batch, lr: ray.get(learner.sft_update.remote(batch, lr=lr)), samples, c.seed,
                    bars, console, check if sft_checks(c) else None,
                    lambda init: ray.get(learner.restart.remote(init)))
    ray.get(learner.reset_reference.remote())  # KL anchors RL to the warm-started policy
    return {"sft_samples": len(samples), **loop, **report}


def scripted_tools(cfg: Any, tool_handles: dict[str, Any]) -> CallCache:
    """The ToolClient scripted plays go through: the tool servers, each distinct call made once
    (orchestra/agent/call_cache.py)."""
    return CallCache(RayToolClient(tool_handles, timeout_s=cfg.zoo.server.timeout_s))


def sft_loop(sc: Any, update: Callable[[list[Any], float], dict[str, float]], samples: list[Any], seed: int,
             bars: Any, console: Any, check: Callable[[int], dict[str, Any]] | None = None,
             restart: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """`sc.steps` SFT updates; with `check` (sft.until_agreement with route hints, sft.until_follows) then chunks of
    steps // 4 more, each followed by `check(steps done)` -> {"passed": bool, "line": what the policy does, "below":
    what falls short, **figures} (cluster/sft_check.train_check, on training tasks), until one passes or sc.max_steps
    are done (the lr decays over those; the last step is checked too, a short last chunk included). With
    `restart(k)` (a fresh policy from init seed start_seed(seed, k)) and sc.starts > 1, a start whose first check
    fails is dropped for a fresh one, its batches in another order; only the last start runs on in chunks.
    {sft_loss, sft_steps_done (the kept start's), sft_starts[, sft_steps_all, sft_agreement_checks]}: each check's
    record is its figures with `step`, `start`, `passed` and `below`."""
    total = max(sc.steps, sc.max_steps) if check else sc.steps
    chunk = max(1, sc.steps // 4)
    starts = sc.starts if check and restart else 1
    metrics: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    steps_all = 0
    for start in range(starts):
        if start:
            restart(start_seed(seed, start))
            metrics = []
        last = start == starts - 1
        bar = bars.add("SFT steps" if starts == 1 else f"SFT steps, start {start + 1}", total)
        for i, batch in enumerate(sft_batches(samples, total, sc.batch_size, start_seed(seed, start))):
            metrics.append(update(batch, sft_lr(sc, i, total)))
            bars.advance(bar)
            done = i + 1
            if done % max(1, sc.steps // 5) == 0 or done == total:
                console.print(f"  sft {done}/{sc.steps if done <= sc.steps else total}: loss "
                              f"{metrics[-1]['sft_loss']:.3f}")
            # checked after sc.steps, after every chunk, and at the last step: the goal the run reports is the last
            # one checked, never a figure taken a chunk earlier
            if check is None or done < sc.steps or ((done - sc.steps) % chunk and done != total):
                continue
            result = dict(check(done))
            line = result.pop("line", "")
            checks.append({"step": done, "start": start + 1, **result, "passed": bool(result["passed"])})
            more = "" if result["passed"] else \
                f"; dropped for a fresh start ({start + 2} of {starts}: sft.starts)" if not last else \
                f"; {min(chunk, total - done)} more steps" if done < total else "; sft.max_steps reached"
            console.print(f"  sft {done}: {line}{more}")
            if result["passed"] or not last:
                break
        bars.remove(bar)
        steps_all += len(metrics)
        if checks and checks[-1]["passed"]:
            break
    return {"sft_loss": metrics[-1]["sft_loss"] if metrics else float("nan"), "sft_steps_done": len(metrics),
            "sft_starts": start + 1, **({"sft_steps_all": steps_all, "sft_agreement_checks": checks} if check else {})}


def start_seed(seed: int, start: int) -> int:
    """The init and batch-order seed of SFT's start `start` (0: the run's own seed, so one start is as before)."""
    return seed + 1_000_003 * start


def sft_checks(cfg: Any) -> list[str]:
    """What SFT checks the policy for before it stops (cluster/sft_check.train_check): `hints` (sft.until_agreement, with
    route hints: it calls its hint's plan) and `follows` (sft.until_follows: its $ follows the eval presets)."""
    s = cfg.sft
    return [name for name, on in (("hints", s.until_agreement and cfg.agent.route_hints), ("follows", s.until_follows))
            if on]


def hint_heldout(run_dir: Path, train: list[Task], heldout: list[Task]) -> None:
    """agent.route_hints: held-out tasks get the fitted router's estimates (training tasks got theirs in
    cluster/teachers/expected_value.py, cross-fitted); both task files are rewritten, so a resumed run and `make eval` read the same."""
    from orchestra.data.tasks import save_tasks
    from orchestra.routing import registry
    from tools.retrieval.dense import embed_texts

    # the hints are the estimator router's estimates (orchestra/routing/hints.py)
    registry.get("estimator").load(Path(run_dir), embed_texts).attach_hints(heldout)
    save_tasks(train, Path(run_dir) / "data" / "train.jsonl")
    save_tasks(heldout, Path(run_dir) / "data" / "heldout.jsonl")


def warm_start_policy(cfg: Any, tool_handles: dict[str, Any], tasks: list[Task], out_dir: str | Path,
                      console: Any) -> dict[str, float]:
    """The warm start as the first stage of a verl job (`verl.warm_start=true`, cluster/verl/job.py): a local
    learner actor (on `cluster.learner_gpus` devices; LoRA adapters when model.lora.r > 0, merged at the end)
    warm-starts the policy on the job's own tool servers, and the result is written as a plain HF checkpoint (model
    + tokenizer; the learner's optimizer, reference and RNG files left out) that verl's trainer starts from."""
    import shutil

    from actors.learner import ADAPTER_DIR, OPTIMIZER_FILE, REF_FILE, RNG_FILE, STATE_FILE
    from cluster.progress import Bars

    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    learner = launch.start_learner(cfg, name="warm-start-learner")
    try:
        # a learner that cannot be placed (no node with cluster.learner_gpus free GPUs: e.g. `ray up`'s GPU workers
        # never launched) would otherwise wait forever at its first call, silently
        launch.wait_ready(cfg, [learner.version.remote()],
                          f"the warm-start learner (cluster.learner_gpus={cfg.cluster.learner_gpus:g})")
        with Bars(console) as bars:
            report = warm_start(cfg, learner, scripted_tools(cfg, tool_handles), tasks, bars, console)
        ray.get(learner.save.remote(str(tmp)))  # a peft learner writes the merged weights as model.safetensors
    finally:
        ray.kill(learner)  # its devices go back before verl places its workers
    for name in (OPTIMIZER_FILE, RNG_FILE, STATE_FILE, REF_FILE):
        (tmp / name).unlink(missing_ok=True)
    shutil.rmtree(tmp / ADAPTER_DIR, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    console.print(f"  warm start: {report.get('sft_samples', 0)} samples, loss {report.get('sft_loss', float('nan')):.3f}; "
                  f"policy for verl in {out}")
    return report
