"""The local-backend training run behind `python -m cluster.train` (cluster/train.py lists its phases).

The driver is one process; every heavy thing is an actor (cluster/launch.py): tool servers, the reward actor,
the learner, rollout workers. `fit` runs the SFT warm start, then the RL steps, then the final evaluation; each
`step` is a flat list of named, timed phases, each one call on an actor group. Recovery: a dead learner is
replaced and the newest good checkpoint restored in-process; a rerun with the same run dir resumes from it
(policy, optimizer, RNG, step, reward-actor counters and metrics; the task order is a pure function of
(seed, step), so a restarted run sees the same tasks).
Below fit / step / recovery: the held-out evaluation (cluster/heldout.py), the SFT phase (cluster/warm_start.py),
rollouts and weight sync (cluster/rollouts.py), episode records (cluster/records.py), checkpoints, the task set
(a resume keeps the first config.yaml when its settings changed) and the end of the run.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import ray
from rich.console import Console

from actors import metrics as dashboard
from actors.rollout_worker import EpisodeResult
from cluster import heldout, launch, rl_gate, sft_check
from cluster.progress import (
    Bars,
    Phases,
    describe,
    engine_line,
    engine_totals,
    family_lines,
    headline,
    preset_lines,
)
from cluster.records import EpisodeRecorder
from cluster.rollouts import (
    Dispatch,
    TaskSampler,
    by_preference,
    step_metrics,
    step_requests,
    training_samples,
)
from cluster.warm_start import hint_heldout, scripted_tools, sft_checks, warm_start
from orchestra.config import ExperimentConfig, save_config, task_tiers
from orchestra.data.sources import build_task_set
from orchestra.data.tasks import load_corpus, load_tasks, save_corpus, save_tasks
from orchestra.preferences import preset
from orchestra.rundir import checkpoint
from orchestra.rundir.records import episode_seed
from orchestra.rundir.tracking import Tracker
from tools.tau2 import wiring as _tau2_wiring  # noqa: F401  registers τ² (task source, judge)


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
        # scripted plays (exploration, demonstrations, SFT's check, the router's held-out plays) make each distinct
        # tool call once (orchestra/agent/call_cache.py); the policy's episodes go through the rollout workers
        self.scripted = scripted_tools(cfg, self.tools)
        self.dispatch = Dispatch(self.workers, self.reward, cfg.cluster.start_timeout_s, self.console, self.bars,
                                 resync=lambda: self.sync_weights(only_stale=True), max_replays=cfg.cluster.max_restarts)
        self.records = EpisodeRecorder(cfg, self.dir, self.tools, self.console)
        self.tracker: Tracker | None = None

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
                if c.agent.route_hints:
                    hint_heldout(self.dir, self.train, self.heldout)
            self.sync_weights()
            with self.phases("eval"):
                summary["after_sft"] = self.evaluate("sft")
                if c.eval.sweep:  # the warm start under the unseen sweep too: the verdict names the phase that lost it
                    sweep = self.evaluate("sweep_sft", heldout.unseen_sweep(c, self.train))
                    summary["sft_unseen_adherence"], summary["sft_unseen_sweep"] = sweep["adherence"], sweep
                if self.val:  # the warm start on RL's validation split (cluster/rl_gate.py)
                    summary["val_sft"] = self.evaluate("val_sft", tasks=self.val)
            self.console.print(f"after SFT ({self.phases.times['sft']:.0f}s): {describe(headline(summary['after_sft']))}"
                               + (f", unseen adherence {summary['sft_unseen_adherence']:.2f}"
                                  if "sft_unseen_adherence" in summary else ""))
            if warning := heldout.hint_warning(summary["after_sft"]):
                self.console.print(f"[yellow]warning: {warning}[/]")
            self.tracker.log(0, {"heldout": summary["after_sft"], "phase_s": self.phases.pop()}, kind="eval")
            warm = self.save(0, summary)
            if self.val:  # checkpoints are pruned as RL goes: the warm start is kept apart to go back to
                rl_gate.keep_warm_start(warm, self.dir)
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
            self.console.print(f"step {step}/{c.algo.steps} " + describe(headline(metrics))
                               + f" | {describe(metrics['phase_s'])}")
            self.bars.advance(bar)
            step += 1
        with self.phases("eval"):
            if rl_gate.gate(self, summary):  # RL kept, or the warm start back (cluster/rl_gate.py)
                summary["after_rl"] = self.evaluate("final")
                if c.eval.sweep:  # held-out tasks under vectors no training used (checked)
                    summary["unseen_sweep"] = self.evaluate("sweep", heldout.unseen_sweep(c, self.train))
            else:  # the warm start is the run's policy: its held-out figures are those taken after SFT
                summary = rl_gate.reverted(summary)
            summary["router"] = self.evaluate_router()
        self.tracker.log(c.algo.steps, {"heldout": summary["after_rl"]}, kind="eval")
        return self._finish(summary)

    # ------------------------------------------------------------------ one RL step
    def step(self, step: int) -> dict[str, Any]:
        ph, c = self.phases, self.cfg
        with ph("sample"):
            requests = step_requests(self.sampler.batch(step), step, c.algo.group_size, c.data.preference_pairs,
                                     c.seed)
            for i, r in enumerate(requests):  # one sampling stream per episode: replayable (cluster/replay.py)
                r["seed"], r["episode_id"] = episode_seed(c.seed, step, i), f"s{step}-e{i}"
        with ph("rollout"):  # episodes are scored by the reward actor as their groups complete
            current = self.sync_weights(only_stale=True)  # a worker restarted since the last sync gets it too
            self.records.keep_weights(self.learner)
            results = self.rollout(requests)
        with ph("samples"):  # the scored episodes' training samples, and the reward actor's step figures
            scored = [r.scored for r in results]
            samples = training_samples(results, c.algo.balance_prefs)
            report = ray.get(self.reward.step_report.remote())
        with ph("record"):
            self.records.write(f"step_{step:06d}", "train", step, requests, results, scored, self._sampling(False))
        with ph("update"):
            update = ray.get(self.learner.update.remote(samples)) if samples else {"skipped": 1.0}
        with ph("sync"):
            # between RL steps only adapters change: workers hold the weights of the last full sync
            version = self.sync_weights(adapter_only=c.model.lora.r > 0) if samples else None
        out = step_metrics(results, scored, current)
        out.update(samples=len(samples), version=version or 0, reward_actor=report, learner=update)
        if c.data.preference_pairs:
            out["by_pref"] = by_preference(scored)
        if c.eval.every_steps and step % c.eval.every_steps == 0:
            with ph("eval"):
                out["heldout"] = self.evaluate(f"step{step}")
        return out

    # ------------------------------------------------------------------ recovery
    def _recover(self, step: int, error: Exception) -> tuple[int, dict[str, Any]]:
        """An actor died under `step`. The learner is started with max_restarts=0 (a restarted one would hold
        initial weights and no optimizer state, and a queued update would silently train it): a dead one is
        replaced by a fresh actor, the newest good checkpoint is restored (policy, optimizer, reward counters,
        workers' weights) and the lost step(s) re-run on the same tasks, as a driver restart would, in-process."""
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

    def save(self, step: int, summary: dict[str, Any]) -> Path:
        reward_state = ray.get(self.reward.state.remote())

        def write(tmp: Path) -> None:
            ray.get(self.learner.save.remote(str(tmp / "learner")))
            (tmp / "reward_state.json").write_text(json.dumps(reward_state))

        return checkpoint.save(self.dir, step, write, {"summary": summary, "version": step},
                               keep=self.cfg.checkpoint.keep)

    def tokenizer(self) -> Any:
        """The policy's tokenizer as this code builds it (the learner and workers load the same)."""
        from orchestra.policy.models import config_tokenizer

        return config_tokenizer(self.cfg.model)

    def restore(self, path: Path) -> tuple[int, dict[str, Any]]:
        checkpoint.check_resumable(path, self.tokenizer())
        ray.get(self.learner.load.remote(str(path / "learner")))
        ray.get(self.reward.load_state.remote(json.loads((path / "reward_state.json").read_text())))
        self.records.kept_versions.clear()  # versions after this checkpoint will be re-made, perhaps with other weights
        self.sync_weights()
        meta = checkpoint.read_meta(path)
        return int(meta["step"]), dict(meta.get("summary", {}))

    # ------------------------------------------------------------------ phases run by fit and step
    def evaluate(self, tag: str, vectors: dict[str, Any] | None = None, tasks: list[Any] | None = None
                 ) -> dict[str, Any]:
        """Held-out score: the mean `scalar` rubric value under each eval preset (cluster/heldout.py); with
        `vectors` (the adherence sweep) the sweep's points and adherence instead; `tasks`: other tasks than the
        held-out ones (RL's validation split)."""
        tasks = tasks if tasks is not None else self.heldout[: self.cfg.eval.n_tasks]
        self.sync_weights(only_stale=True)  # a worker restarted since the last sync holds its initial weights
        prefs = list(vectors) if vectors else heldout.presets(self.cfg)
        requests = heldout.requests(tasks, self.cfg.seed, self.cfg.eval.seeds, tag,
                                    prefs if vectors or len(prefs) > 1 else None, vectors)
        self.records.keep_weights(self.learner)
        bar = self.bars.add(f"eval {tag}", len(requests))
        results = self.rollout(requests, eval_mode=True, bar=bar)
        self.bars.remove(bar)
        scored = heldout.score(results, requests, self.cfg)
        self.records.write(f"eval_{tag}", "eval", -1, requests, results, scored, self._sampling(True))
        if vectors:
            return heldout.sweep_summary(results, scored, requests)
        out = heldout.summary(results, scored, tasks, requests, prefs)
        if self.cfg.agent.route_hints:  # which plan the policy called against what its router line said
            out.update(heldout.hint_agreement(results, requests, prefs))
        dashboard.record("heldout_score", out["score"], stage=tag)
        return out

    def evaluate_router(self) -> dict[str, Any]:
        """The estimator router the warm start fitted, on the same held-out tasks and presets (cluster/heldout.py)."""
        sweep = heldout.unseen_sweep(self.cfg, self.train) if self.cfg.eval.sweep else None
        return heldout.router_summary(self.cfg, self.dir, self.heldout[: self.cfg.eval.n_tasks], self.scripted,
                                      self.tokenizer(), sweep)

    def sft(self) -> dict[str, float]:
        """The SFT warm start (cluster/warm_start.py); sft.until_agreement / until_follows check the policy as it goes."""
        c = self.cfg
        return warm_start(c, self.learner, self.scripted, self.train, self.bars, self.console,
                          check=sft_check.checker(self, sft_checks(c)))

    def rollout(self, requests: list[dict[str, Any]], eval_mode: bool = False, bar: Any = None
                ) -> list[EpisodeResult]:
        """Play the requests on the workers (cluster/rollouts.py); training rollouts are scored as they finish."""
        return self.dispatch.run(requests, self._sampling(eval_mode), score=not eval_mode, bar=bar)

    def _sampling(self, eval_mode: bool) -> dict[str, Any]:
        s = self.cfg.sampling
        temperature = self.cfg.eval.temperature if eval_mode else s.temperature
        return {"max_tokens": s.max_tokens, "temperature": temperature, "top_p": s.top_p, "top_k": s.top_k}

    def sync_weights(self, only_stale: bool = False, adapter_only: bool = False) -> int:
        """The learner's weights to the workers (cluster/rollouts.Dispatch.sync_weights)."""
        self.version = self.dispatch.sync_weights(self.learner, only_stale, adapter_only)
        return self.version

    # ------------------------------------------------------------------ the task set
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
        rl_tasks, self.val = rl_gate.split(self.train, self.cfg.algo.val_share)  # RL's validation split
        self.sampler = TaskSampler(rl_tasks, self.cfg.algo.prompts_per_step, self.cfg.seed)
        if note := save_config(self.dir, self.cfg):  # a resume under changed settings keeps the first config
            self.console.print(f"[yellow]{note}[/]")

    # ------------------------------------------------------------------ the end
    def _finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        sft, rl = summary.get("after_sft", {}), summary["after_rl"]
        if sft:  # the kept policy's gain (0 where RL was not kept: cluster/rl_gate.py)
            summary["heldout_reward_gain"] = rl["score"] - sft["score"]
            self.console.print(heldout.add_interval(summary, "heldout_reward_gain", rl, sft, "RL over its warm start"))
        for key in ("pref_spread", "monotone", "format_ok", "hint_agreement"):
            if key in rl:
                summary[f"heldout_{key}"] = rl[key]
        if summary.get("router"):
            summary["heldout_vs_estimator"] = rl["score"] - summary["router"]["score"]
            self.console.print(heldout.add_interval(summary, "heldout_vs_estimator", rl, summary["router"],
                                                    "the policy minus the estimator router"))
        if summary.get("unseen_sweep"):
            summary["heldout_unseen_adherence"] = summary["unseen_sweep"]["adherence"]
            self.console.print("held-out, unseen sweep (cost weight: ¢, accuracy): " + ", ".join(
                f"{p['cost_weight']:g}: {100 * p['cost_usd']:.4f}, {p['accuracy']:.3f}"
                for p in summary["unseen_sweep"]["points"]) + f"; adherence {summary['heldout_unseen_adherence']:.2f}")
            seen = heldout.sweep_read_as_trained(self.cfg, self.train)  # unseen vectors, yet perhaps trained prompts
            summary["heldout_sweep_read_as_trained"] = len(seen)
            for name, like in seen.items():
                self.console.print(f"[yellow]note: {name} reads, as the policy sees it, like {like}[/]")
        summary["train_wall_s"] = time.perf_counter() - self.started
        summary["engines"] = self._engine_report()
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
        if self.cfg.log.plots and self.tracker is not None:
            try:
                from orchestra.eval.plots import plot_training
                from orchestra.eval.tool_bands import catalogue_ids

                plot_training(self.tracker.path, self.dir / "plots",
                              catalogue_ids(self.train + self.heldout, task_tiers(self.cfg)))
            except Exception as e:  # plots are a convenience; never lose a finished run over them
                self.console.print(f"[yellow]plots skipped: {e}[/]")
        for tag in ("after_sft", "after_rl"):
            if tag in summary:
                self.console.print(f"held-out {tag}: {describe(headline(summary[tag]))}")
        url, series = dashboard.exported()
        if series:  # what Prometheus/Grafana can chart (cluster/grafana/orchestra_dashboard.json)
            self.console.print(f"dashboard: {len(series)} Orchestra metrics, {sum(series.values())} labelled series "
                               f"at {url}")
        for line in family_lines(sft, rl):
            self.console.print(line)
        for line in preset_lines(sft, rl, summary.get("router", {})):
            self.console.print(line)
        return summary

    def _engine_report(self) -> dict[str, float]:
        """The rollout engines' counters over the run (evaluations included), summed over workers, and one
        console line; empty for engines that keep none (vLLM, scripted)."""
        try:
            tot = engine_totals(self.dispatch.call_all([w.stats.remote for w in self.workers]))
        except Exception as e:  # a report; never lose a finished run over it
            self.console.print(f"[yellow]engine stats skipped: {e}[/]")
            return {}
        if tot:
            self.console.print(engine_line(tot))
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
