"""The local-backend training run behind `python -m cluster.train` (see cluster/train.py for the phase list).

The driver is one process; every heavy thing is an actor (cluster/launch.py): tool servers, the reward actor,
the learner, rollout workers. Each step is a flat list of named, timed phases, each one call on an actor group.
Resume: the newest good checkpoint in the run dir restores policy, optimizer, RNG, step, reward-actor counters
and metrics; the task order is a pure function of (seed, step), so a restarted run sees the same tasks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections import Counter
from pathlib import Path
from statistics import mean
from typing import Any

import ray
from rich.console import Console

from actors import metrics as dashboard
from cluster import launch
from cluster.progress import Bars, Phases, describe
from orchestra.agent.loop import episode_samples
from orchestra.config import ExperimentConfig, task_tiers, to_yaml
from orchestra.data.sources import build_task_set
from orchestra.data.tasks import load_corpus, load_tasks, save_corpus, save_tasks
from orchestra.preferences import paired_preferences, preset
from orchestra.rundir import checkpoint
from orchestra.rundir.records import EpisodeLog, episode_record, episode_seed, save_weights, score_kwargs
from orchestra.rundir.tracking import Tracker
from orchestra.tau2 import wiring as _tau2_wiring  # noqa: F401  registers τ² (task source, judge)
from orchestra.types import Task, Trajectory


class TaskSampler:
    """Deterministic task order: epoch e is a permutation seeded by (seed, e); step s takes the next slice."""

    def __init__(self, tasks: list[Task], per_step: int, seed: int):
        self.tasks, self.per_step, self.seed = tasks, per_step, seed

    def batch(self, step: int) -> list[Task]:
        out, n = [], len(self.tasks)
        for k in range((step - 1) * self.per_step, step * self.per_step):
            epoch, pos = divmod(k, n)
            order = list(range(n))
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
            out.append(self.tasks[order[pos]])
        return out


class Trainer:
    def __init__(self, cfg: ExperimentConfig, console: Console | None = None):
        self.cfg, self.console = cfg, console or Console()
        self.bars = Bars(self.console)
        self.dir = Path(cfg.run_dir).expanduser().resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.phases = Phases()
        self.started = time.perf_counter()
        self._data()
        self.console.print(f"[bold]orchestra[/] {cfg.name}: {len(self.train)} train / {len(self.heldout)} held-out "
                           f"tasks, run dir {self.dir}")
        self.console.print(f"ray: {launch.init_ray(cfg)}")
        launch.check_resources(cfg)
        with self.phases("start actors"):
            self.tools = launch.start_tool_servers(cfg)
            self.reward = launch.start_reward_actor(cfg)
            self.learner = launch.start_learner(cfg)
            self.workers = launch.start_rollout_workers(cfg, self.tools, self.reward)
        self.console.print(f"actors up in {self.phases.times['start actors']:.1f}s: {len(self.workers)} rollout "
                           f"worker(s), tools {sorted(self.tools)}")
        self.tracker: Tracker | None = None
        self._episodes: EpisodeLog | None = None  # episode records, opened at the first rollout
        self._kept_versions: set[int] = set()  # policy versions whose weights this process saved for replay

    # ------------------------------------------------------------------ data
    def _data(self) -> None:
        data = self.dir / "data"
        files = [data / "train.jsonl", data / "heldout.jsonl", data / "corpus.jsonl"]
        if all(f.is_file() for f in files):  # resume: the exact same tasks as the first run
            self.train, self.heldout, corpus = load_tasks(files[0]), load_tasks(files[1]), load_corpus(files[2])
        else:
            self.train, self.heldout, corpus = build_task_set(self.cfg.data, task_tiers(self.cfg))
            pref = preset(self.cfg.eval.preference)
            for t in self.heldout:  # held-out score is absolute: one fixed preference for every task
                t.pref = dict(pref)
            data.mkdir(parents=True, exist_ok=True)
            save_tasks(self.train, files[0])
            save_tasks(self.heldout, files[1])
            save_corpus(corpus, files[2])
        if not self.cfg.zoo.retriever.corpus:
            self.cfg.zoo.retriever.corpus = str(files[2])
        self.sampler = TaskSampler(self.train, self.cfg.algo.prompts_per_step, self.cfg.seed)
        (self.dir / "config.yaml").write_text(to_yaml(self.cfg))

    # ------------------------------------------------------------------ rollouts
    def _sampling(self, eval_mode: bool) -> dict[str, Any]:
        s = self.cfg.sampling
        temperature = self.cfg.eval.temperature if eval_mode else s.temperature
        return {"max_tokens": s.max_tokens, "temperature": temperature, "top_p": s.top_p, "top_k": s.top_k}

    def rollout(self, requests: list[dict[str, Any]], eval_mode: bool = False,
                bar: Any = None) -> list[dict[str, Any]]:
        """Spread whole groups over the workers; ray.wait for them; a dead worker's episodes become errors."""
        by_uid: dict[str, list[dict[str, Any]]] = {}
        for r in requests:
            by_uid.setdefault(r["uid"], []).append(r)
        shards: list[list[dict[str, Any]]] = [[] for _ in self.workers]
        for i, group in enumerate(by_uid.values()):
            shards[i % len(shards)].extend(group)
        pending = {w.rollout.remote(shard, self._sampling(eval_mode), score=not eval_mode): shard
                   for w, shard in zip(self.workers, shards) if shard}
        results: list[dict[str, Any]] = []
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            shard = pending.pop(done[0])
            try:
                results.extend(ray.get(done[0]))
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                self.console.print(f"[red]rollout worker failed ({type(e).__name__}); {len(shard)} episodes "
                                   "marked as errors with the failure reward[/]")
                results.extend(self._failed(shard, f"rollout worker died: {type(e).__name__}", eval_mode))
            if bar is not None:
                self.bars.advance(bar, len(shard))
        return results

    def _failed(self, shard: list[dict[str, Any]], reason: str, eval_mode: bool) -> list[dict[str, Any]]:
        out = [{"traj": Trajectory(task_id=r["task"]["id"], uid=r["uid"], termination="error", error=reason).to_dict(),
                "task_id": r["task"]["id"], "uid": r["uid"]} for r in shard]
        if not eval_mode:  # submit every member before waiting: a group is answered only once it is complete
            refs = [self.reward.submit.remote(o["traj"], r["task"], r["group_size"]) for o, r in zip(out, shard)]
            for o, scored in zip(out, ray.get(refs)):
                o["scored"] = scored
        return out

    def sync_weights(self, only_stale: bool = False, adapter_only: bool = False) -> int:
        """Push the learner's weights to the workers (one object-store object read by all). A worker that is
        restarting is waited for; with `only_stale`, only workers behind the learner's version are updated
        (a restarted worker comes back with its initial weights, so it gets full weights). `adapter_only`:
        a LoRA learner sends its adapter, which workers merge into the weights of their last full sync."""
        weights = self.learner.get_weights.remote(adapter_only=adapter_only and not only_stale)
        workers = self.workers
        if only_stale:
            current = self._call_all([w.ready_version.remote for w in workers])
            target = ray.get(self.learner.version.remote())
            workers = [w for w, v in zip(workers, current) if v != target]
            if not workers:
                return target
        versions = self._call_all([lambda w=w: w.load_weights_packed.remote(weights) for w in workers])
        self.version = versions[0]
        return self.version

    def _call_all(self, calls: list[Any]) -> list[Any]:
        """ray.get of one call per actor, retrying actors that are restarting (until cluster.start_timeout_s)."""
        deadline = time.monotonic() + self.cfg.cluster.start_timeout_s
        while True:
            try:
                return ray.get([call() for call in calls])
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, tag: str) -> dict[str, float]:
        """Held-out score: the mean `scalar` rubric value under the eval preference (absolute, not relative)."""
        from reward.score import score_group

        tasks = self.heldout[: self.cfg.eval.n_tasks]
        self.sync_weights(only_stale=True)  # a worker restarted since the last sync holds its initial weights
        # each held-out episode's seed depends on (task, k) only, not on `tag`: the evaluations before and after
        # RL draw the same random numbers (common random numbers: less noise in the gain they measure)
        requests = [{"task": t.to_dict(), "uid": f"eval-{tag}-{t.id}-{k}", "group_size": 1,
                     "seed": episode_seed(self.cfg.seed, "eval", t.id, k), "episode_id": f"eval-{tag}-{t.id}-{k}"}
                    for k in range(self.cfg.eval.seeds) for t in tasks]
        self._keep_weights()
        bar = self.bars.add(f"eval {tag}", len(requests))
        results = self.rollout(requests, eval_mode=True, bar=bar)
        self.bars.remove(bar)
        by_id = {t.id: t for t in tasks}
        trajs = [Trajectory.from_dict(r["traj"]) for r in results]
        scored = asyncio.run(score_group(trajs, [by_id[t.task_id] for t in trajs],
                                         **score_kwargs(self.cfg, "eval")))
        self._record(f"eval_{tag}", "eval", -1, requests, results, [s.to_dict() for s in scored])
        mix = Counter(k for s in scored for k, v in s.tool_counts.items() for _ in range(v))
        families: dict[str, list[Any]] = {}
        for s, tr in zip(scored, trajs, strict=True):
            families.setdefault(str(by_id[tr.task_id].meta.get("family", "all")), []).append(s)
        score = mean(s.reward for s in scored)
        dashboard.record("heldout_score", score, stage=tag)
        return {"score": score, "accuracy": mean(float(s.correct) for s in scored),
                # per task family: where the routing improved (score, accuracy, $)
                "by_family": {f: {"score": mean(s.reward for s in v), "accuracy": mean(float(s.correct) for s in v),
                                  "cost_usd": mean(s.cost["total_usd"] for s in v), "episodes": len(v)}
                              for f, v in sorted(families.items())},
                "cost_usd": mean(s.cost["total_usd"] for s in scored), "latency_s": mean(s.latency_s for s in scored),
                "format_ok": mean(float(all(t.format_ok for t in tr.turns)) for tr in trajs),
                "answered": mean(float(tr.termination == "answered") for tr in trajs),
                "tool_mix": {k: v / len(scored) for k, v in sorted(mix.items())}, "episodes": len(scored)}

    # ------------------------------------------------------------------ SFT
    def sft(self) -> dict[str, float]:
        from actors.tool_server import RayToolClient
        from orchestra.data.demos import demo_samples, sft_batches, sft_lr
        from orchestra.policy.models import load_tokenizer
        from orchestra.policy.tokenizer import eos_token_ids
        from reward.score import score_episode

        c = self.cfg
        tok = load_tokenizer(c.model.name, tiny=c.model.tiny, cache_dir=c.model.cache_dir,
                             chat_template=c.model.chat_template)
        # Demonstrations go through the run's own tool servers: no second retriever index in the driver.
        tools = RayToolClient(self.tools, timeout_s=c.zoo.server.timeout_s)
        r = c.reward

        async def scorer(traj, task):  # used when sft.candidates > 1: the held-out score's own rubric
            return (await score_episode(traj, task, dict(r.judges), cost_scale=r.cost_scale,
                                        latency_scale=r.latency_scale, price_in=c.model.price_in_per_mtok,
                                        price_out=c.model.price_out_per_mtok))[3]

        tasks = paired_tasks(self.train, c.data.preference_pairs, c.seed) if c.sft.paired else self.train
        samples = demo_samples(tasks, tools, tok, launch.prompter_kwargs(c), launch.agent_kwargs(c),
                               eos_token_ids(tok), c.sft.demos, c.seed, c.sampling.max_tokens,
                               candidates=c.sft.candidates, scorer=scorer)
        metrics: list[dict[str, Any]] = []
        bar = self.bars.add("SFT steps", c.sft.steps)
        for i, batch in enumerate(sft_batches(samples, c.sft.steps, c.sft.batch_size, c.seed)):
            metrics.append(ray.get(self.learner.sft_update.remote(batch, lr=sft_lr(c.sft, i))))
            self.bars.advance(bar)
            if (i + 1) % max(1, c.sft.steps // 5) == 0:
                self.console.print(f"  sft {i + 1}/{c.sft.steps}: loss {metrics[-1]['sft_loss']:.3f}")
        ray.get(self.learner.reset_reference.remote())  # KL anchors RL to the warm-started policy
        return {"sft_samples": len(samples), "sft_loss": metrics[-1]["sft_loss"] if metrics else float("nan")}

    # ------------------------------------------------------------------ one RL step
    def step(self, step: int) -> dict[str, Any]:
        ph, g = self.phases, self.cfg.algo.group_size
        with ph("sample"):
            requests = step_requests(self.sampler.batch(step), step, g, self.cfg.data.preference_pairs,
                                     self.cfg.seed)
            for i, r in enumerate(requests):  # one sampling stream per episode: replayable (cluster/replay.py)
                r["seed"], r["episode_id"] = episode_seed(self.cfg.seed, step, i), f"s{step}-e{i}"
        with ph("rollout"):
            current = self.sync_weights(only_stale=True)  # a worker restarted since the last sync gets it too
            self._keep_weights()
            results = self.rollout(requests)
        with ph("advantages"):
            samples, scored = self._samples(results)
            report = ray.get(self.reward.step_report.remote())
        with ph("record"):
            self._record(f"step_{step:06d}", "train", step, requests, results, scored)
        with ph("update"):
            update = ray.get(self.learner.update.remote(samples)) if samples else {"skipped": 1.0}
        with ph("sync"):
            # between RL steps only adapters change: workers hold the weights of the last full sync
            version = self.sync_weights(adapter_only=self.cfg.model.lora.r > 0) if samples else None
        played = [r["traj"].get("policy_version", current) for r in results
                  if r["traj"].get("termination") != "error"]
        out: dict[str, Any] = {"reward": mean(s["reward"] for s in scored),
                               "accuracy": mean(float(s["correct"]) for s in scored),
                               "cost_usd": mean(s["cost"]["total_usd"] for s in scored),
                               "latency_s": mean(s["latency_s"] for s in scored),
                               "format_ok": mean(float(all(t["format_ok"] for t in r["traj"]["turns"])) for r in results),
                               "samples": len(samples), "version": version or 0, "reward_actor": report,
                               # 0 while rollouts wait for each sync (this trainer); > 0: off-policy data
                               "version_lag": max([current - v for v in played] or [0]),
                               "learner": update}
        if self.cfg.data.preference_pairs:  # does the policy act differently per vector? ($ and accuracy per k)
            by_k: dict[str, list[dict[str, Any]]] = {}
            for s in scored:
                by_k.setdefault(s["uid"].rsplit("-p", 1)[-1], []).append(s)
            out["by_pref"] = {f"p{k}": {"cost_usd": mean(s["cost"]["total_usd"] for s in v),
                                        "accuracy": mean(float(s["correct"]) for s in v)}
                              for k, v in sorted(by_k.items())}
        if self.cfg.eval.every_steps and step % self.cfg.eval.every_steps == 0:
            with ph("eval"):
                out["heldout"] = self.evaluate(f"step{step}")
        return out

    def _samples(self, results: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        samples, scored = [], []
        for r in results:
            s = r["scored"]
            scored.append(s)
            if s.get("dropped") or s.get("status") != "scored":
                continue
            for sample in episode_samples(Trajectory.from_dict(r["traj"])):
                samples.append({**sample.__dict__, "advantage": s["advantage"]})
        return samples, scored

    # ------------------------------------------------------------------ episode records (cluster/replay.py)
    def _record(self, name: str, kind: str, step: int, requests: list[dict[str, Any]],
                results: list[dict[str, Any]], scored: list[dict[str, Any]]) -> None:
        """Write one record per episode; a failure here is reported and never stops training."""
        if not self.cfg.log.episodes:
            return
        from actors.tool_server import RayToolClient

        try:
            if self._episodes is None:
                self._episodes = EpisodeLog(self.dir)
                self._schema_client = RayToolClient(self.tools, timeout_s=self.cfg.zoo.server.timeout_s)
            by_id = {r["episode_id"]: r for r in requests}
            records = []
            for res, s in zip(results, scored, strict=True):
                req = by_id.get(res["traj"].get("episode_id", ""))
                if req is None:  # a worker died under it: nothing was generated to replay
                    continue
                key = self._episodes.schema_key(self._schema_client.schemas(Task.from_dict(req["task"])))
                records.append(episode_record(kind, step, req, self._sampling(kind == "eval"), res["traj"], s, key))
            self._episodes.write(name, records)
        except Exception as e:
            self.console.print(f"[yellow]episode records for {name} not written: {type(e).__name__}: {e}[/]")

    def _keep_weights(self) -> None:
        """With log.replay_weights, save the weights the coming rollouts run on (once per version and process:
        a step re-run after a restore may reach the same version number with other weights)."""
        if not (self.cfg.log.episodes and self.cfg.log.replay_weights):
            return
        try:
            if ray.get(self.learner.version.remote()) not in self._kept_versions:
                version, state = ray.get(self.learner.get_weights.remote())
                save_weights(self.dir, version, state)
                self._kept_versions.add(version)
        except Exception as e:  # replay will name the version it lacks; the run goes on
            self.console.print(f"[yellow]weights for replay not saved: {type(e).__name__}: {e}[/]")

    # ------------------------------------------------------------------ checkpoints
    def save(self, step: int, summary: dict[str, Any]) -> Path:
        reward_state = ray.get(self.reward.state.remote())

        def write(tmp: Path) -> None:
            ray.get(self.learner.save.remote(str(tmp / "learner")))
            (tmp / "reward_state.json").write_text(json.dumps(reward_state))

        return checkpoint.save(self.dir, step, write, {"summary": summary, "version": step},
                               keep=self.cfg.checkpoint.keep)

    def restore(self, path: Path) -> tuple[int, dict[str, Any]]:
        ray.get(self.learner.load.remote(str(path / "learner")))
        ray.get(self.reward.load_state.remote(json.loads((path / "reward_state.json").read_text())))
        self._kept_versions.clear()  # versions after this checkpoint will be re-made, perhaps with other weights
        self.sync_weights()
        meta = checkpoint.read_meta(path)
        return int(meta["step"]), dict(meta.get("summary", {}))

    # ------------------------------------------------------------------ the run
    def fit(self) -> dict[str, Any]:
        with self.bars:
            return self._fit()

    def _fit(self) -> dict[str, Any]:
        c = self.cfg
        good = checkpoint.latest_good(self.dir, report=lambda m: self.console.print(f"[yellow]{m}[/]"))
        self.tracker = Tracker(self.dir, c.log.tensorboard, c.log.wandb_project, resume=good is not None)
        if good is not None:
            start, summary = self.restore(good)
            self.console.print(f"resumed from {good.name} (step {start})")
        else:
            start, summary = 0, {}
            with self.phases("sft"):
                summary.update(self.sft())
            self.sync_weights()
            with self.phases("eval"):
                summary["after_sft"] = self.evaluate("sft")
            self.console.print(f"after SFT ({self.phases.times['sft']:.0f}s): {describe(_headline(summary['after_sft']))}")
            self.tracker.log(0, {"heldout": summary["after_sft"], "phase_s": self.phases.pop()}, kind="eval")
            self.save(0, summary)
        step, recoveries = start + 1, 0
        bar = self.bars.add("RL steps", c.algo.steps, completed=start)
        while step <= c.algo.steps:
            try:
                metrics = self.step(step)
                if step % c.checkpoint.every_steps == 0 or step == c.algo.steps:
                    with self.phases("checkpoint"):
                        self.save(step, summary)
            except ray.exceptions.RayActorError as e:  # the learner (or an actor past its retries) died
                recoveries += 1
                if recoveries > c.cluster.max_restarts:
                    raise
                start, summary = self._recover(step, e)
                step = start + 1
                self.bars.set(bar, start)
                continue
            metrics["phase_s"] = self.phases.pop()
            self.tracker.log(step, metrics)
            dashboard.record_step(step, metrics)
            self.console.print(f"step {step}/{c.algo.steps} " + describe(_headline(metrics))
                               + f" | {describe(metrics['phase_s'])}")
            self.bars.advance(bar)
            step += 1
        with self.phases("eval"):
            summary["after_rl"] = self.evaluate("final")
        self.tracker.log(c.algo.steps, {"heldout": summary["after_rl"]}, kind="eval")
        return self._finish(summary)

    def _recover(self, step: int, error: Exception) -> tuple[int, dict[str, Any]]:
        """An actor died under `step`. The learner is started with max_restarts=0 (a restarted learner would
        hold initial weights and no optimizer state, and a queued update would silently train it): a dead one
        is replaced by a fresh actor, then the newest good checkpoint is restored (policy, optimizer, reward
        counters, workers' weights) and the run goes on from there, re-running the lost step(s) with the same
        tasks — what a driver restart would do, without restarting the other actors."""
        good = checkpoint.latest_good(self.dir, report=lambda m: self.console.print(f"[yellow]{m}[/]"))
        if good is None:
            raise error
        self.console.print(f"[red]step {step}: {type(error).__name__}; resuming in-process from {good.name}[/]")
        deadline = time.monotonic() + self.cfg.cluster.start_timeout_s
        while True:
            try:
                ray.get(self.learner.version.remote(), timeout=self.cfg.cluster.start_timeout_s)
                break
            except ray.exceptions.ActorUnavailableError:  # not yet known dead or alive
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
            except ray.exceptions.RayActorError:
                self.learner = None  # drop the dead actor's handle: Ray frees its name once no handle is left
                try:
                    self.learner = launch.start_learner(self.cfg)
                except ValueError:  # the name is still held (another handle to the dead actor is alive)
                    self.learner = launch.start_learner(self.cfg, name=f"learner-{step}-{time.time_ns()}")
                launch.wait_ready(self.cfg, [self.learner.version.remote()], "learner")
                break
        self.phases.pop()
        return self.restore(good)

    def _finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        sft, rl = summary.get("after_sft", {}), summary["after_rl"]
        if sft:
            summary["heldout_reward_gain"] = rl["score"] - sft["score"]
        summary["train_wall_s"] = time.perf_counter() - self.started
        summary["engines"] = self._engine_report()
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
        if self.cfg.log.plots and self.tracker is not None:
            try:
                from orchestra.eval.plots import plot_training

                plot_training(self.tracker.path, self.dir / "plots")
            except Exception as e:  # plots are a convenience; never lose a finished run over them
                self.console.print(f"[yellow]plots skipped: {e}[/]")
        for tag in ("after_sft", "after_rl"):
            if tag in summary:
                self.console.print(f"held-out {tag}: {describe(_headline(summary[tag]))}")
        url, series = dashboard.exported()
        if series:  # what Prometheus/Grafana can chart (cluster/grafana/orchestra_dashboard.json)
            self.console.print(f"dashboard: {len(series)} Orchestra metrics, {sum(series.values())} labelled series "
                               f"at {url}")
        for fam, after in rl.get("by_family", {}).items():
            before = sft.get("by_family", {}).get(fam, {})
            change = {k: (f"{before[k]:.3g} -> " if k in before else "") + f"{after[k]:.3g}"
                      for k in ("score", "accuracy", "cost_usd")}
            self.console.print(f"  {fam} ({after['episodes']} episodes): score {change['score']}, "
                               f"accuracy {change['accuracy']}, $ {change['cost_usd']}")
        return summary

    def _engine_report(self) -> dict[str, float]:
        """The rollout engines' counters over the run (evaluations included), summed over workers, and one
        console line; empty for engines that keep none (vLLM, scripted)."""
        keys = ("batches", "joins", "rows", "tokens_generated", "prompt_tokens", "reused_prefix_tokens", "busy_s",
                "queue_wait_s")
        try:
            per = self._call_all([w.stats.remote for w in self.workers])
        except Exception as e:  # a report; never lose a finished run over it
            self.console.print(f"[yellow]engine stats skipped: {e}[/]")
            return {}
        tot = {k: float(sum(p.get(k, 0) for p in per)) for k in keys}
        if not tot["batches"]:
            return {}
        self.console.print(
            f"rollout engines: {tot['batches']:.0f} batches + {tot['joins']:.0f} joins of queued requests into running "
            f"ones, mean {tot['rows'] / (tot['batches'] + tot['joins']):.1f} rows each, busy "
            f"{tot['busy_s']:.0f} s at {tot['tokens_generated'] / max(tot['busy_s'], 1e-9):.0f} generated tok/s, "
            f"{tot['reused_prefix_tokens'] / max(tot['prompt_tokens'], 1):.0%} of prompt tokens reused from kept KV "
            f"caches, mean wait for a batch {1000 * tot['queue_wait_s'] / tot['rows']:.0f} ms per request")
        return tot

    def close(self) -> None:
        """Close logs and end this run's actors (a shared cluster outlives the run)."""
        if self.tracker is not None:
            self.tracker.close()
        for handle in [*self.workers, self.learner, self.reward, *self.tools.values()]:
            try:
                ray.kill(handle, no_restart=True)
            except Exception:  # already gone
                pass


def step_requests(tasks: list[Task], step: int, group_size: int, pairs: str = "", seed: int = 0
                  ) -> list[dict[str, Any]]:
    """One step's rollout requests: `group_size` episodes per task, one group (uid) each. With preference
    pairing (`data.preference_pairs`) each task is rolled out under every vector of the pairing, one group
    per (task, vector), each request carrying the task with that vector: the reward actor scores every
    episode under its own vector and baselines it against the same task under the same vector, so the
    advantage says which route suits *this* preference on *this* task."""
    out: list[dict[str, Any]] = []
    for i, t in enumerate(tasks):
        if not pairs:
            out += [{"task": t.to_dict(), "uid": f"s{step}-{i}-{t.id}", "group_size": group_size}
                    for _ in range(group_size)]
            continue
        for k, pref in enumerate(paired_preferences(pairs, t.id, step, seed, list(t.model_mapping))):
            task = {**t.to_dict(), "pref": pref}
            out += [{"task": task, "uid": f"s{step}-{i}-{t.id}-p{k}", "group_size": group_size}
                    for _ in range(group_size)]
    return out


def paired_tasks(tasks: list[Task], pairs: str, seed: int = 0) -> list[Task]:
    """SFT with `sft.paired`: every task under every vector of the pairing, interleaved (task 0 under each
    vector, then task 1, ...) so a prefix of the list covers whole tasks. Sampled vectors are drawn as for
    RL step -1 (a stream of their own)."""
    return [dataclasses.replace(t, pref=pref) for t in tasks
            for pref in paired_preferences(pairs, t.id, -1, seed, list(t.model_mapping))]


def _headline(m: dict[str, Any]) -> dict[str, Any]:
    keys = ("score", "reward", "accuracy", "cost_usd", "latency_s", "format_ok")
    return {k: float(m[k]) for k in keys if k in m}
