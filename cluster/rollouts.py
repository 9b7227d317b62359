"""Rollout dispatch for the local backend: which episodes a step plays, and playing them on the rollout workers.

- `TaskSampler`: the deterministic task order (epoch e is a permutation seeded by (seed, e); step s takes the next
  slice), so a resumed run sees the same tasks; `step_requests` / `paired_tasks`: a step's groups, one per task
  or, with preference pairing (`data.preference_pairs`), one per (task, vector); `run_order`: every step's tasks in
  a row, the order the verl backend's staged parquet holds, so its step s plays the local step s's groups.
- `Dispatch`: whole groups spread over the worker actors, `ray.wait` for them, results in request order; a worker
  that dies mid-rollout (its process or its node) has its groups forgotten by the reward actor and played again once
  it is restarted with the current weights, so no episode is dropped or counted twice; and weight sync from the
  learner.
Results come back typed (actors/rollout_worker.EpisodeResult); a step's results become its training samples
(`training_samples`, advantages balanced per vector) and figures (`step_metrics`, `by_preference`). Which phase
runs when is cluster/trainer.py's.
"""

from __future__ import annotations

import dataclasses
import random
import time
from statistics import mean
from typing import Any

import ray

from actors.rollout_worker import EpisodeResult
from orchestra.agent.loop import episode_samples
from orchestra.preferences import paired_preferences
from orchestra.types import Task, TrainSample
from reward.advantages import balance_by_key
from reward.score import Scored


class TaskSampler:
    """Deterministic task order: epoch e is a permutation seeded by (seed, e); step s takes the next slice."""

    def __init__(self, tasks: list[Task], per_step: int, seed: int):
        self.tasks, self.per_step, self.seed = tasks, per_step, seed
        self._epoch, self._order = -1, []  # the current epoch's permutation, drawn once (not once per task)

    def batch(self, step: int) -> list[Task]:
        out, n = [], len(self.tasks)
        for k in range((step - 1) * self.per_step, step * self.per_step):
            epoch, pos = divmod(k, n)
            if epoch != self._epoch:
                self._epoch, self._order = epoch, list(range(n))
                random.Random(f"{self.seed}:{epoch}").shuffle(self._order)
            out.append(self.tasks[self._order[pos]])
        return out


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


def paired_tasks(tasks: list[Task], pairs: str, seed: int = 0, step: int = -1) -> list[Task]:
    """Every task under every vector of the pairing, interleaved (task 0 under each vector, then task 1, ...) so a
    prefix of the list covers whole tasks; sampled vectors are RL step `step`'s. SFT with `sft.paired` draws them as
    for step -1 (a stream of their own)."""
    return [dataclasses.replace(t, pref=pref) for t in tasks
            for pref in paired_preferences(pairs, t.id, step, seed, list(t.model_mapping))]


def run_order(tasks: list[Task], per_step: int, steps: int, pairs: str = "", seed: int = 0) -> list[Task]:
    """The tasks of steps 1..`steps` as TaskSampler draws them, each once per vector its step gives it
    (`step_requests`' vectors): verl reads them unshuffled, `per_step` x vectors rows a step, so its epochs are
    reshuffled as the local trainer's are and paired rows stay adjacent (issue 51: verl's own shuffle would split
    the pairs, and without it every epoch saw one order)."""
    sampler, out = TaskSampler(tasks, per_step, seed), []
    for step in range(1, steps + 1):
        out += paired_tasks(sampler.batch(step), pairs, seed, step) if pairs else sampler.batch(step)
    return out


class Dispatch:
    """Rollouts on the worker actors, and weight sync to them."""

    def __init__(self, workers: list[Any], reward: Any, start_timeout_s: float, console: Any, bars: Any,
                 resync: Any = None, max_replays: int = 3):
        self.workers, self.reward, self.start_timeout_s = workers, reward, start_timeout_s
        self.console, self.bars = console, bars
        # after a worker died: wait for the restarted workers and give them the current weights (the trainer's
        # sync_weights(only_stale=True)); a replay on initial weights would train on another policy's episodes
        self.resync, self.max_replays = resync, max_replays
        self.replays = 0  # shards played again over the run (a worker or its node lost mid-rollout)

    def run(self, requests: list[dict[str, Any]], sampling: dict[str, Any], score: bool,
            bar: Any = None) -> list[EpisodeResult]:
        """Spread whole groups over the workers; ray.wait for them. A worker that dies mid-shard (the process, or
        its node) takes nothing with it: its groups are forgotten by the reward actor (their partial or scored
        members), and once Ray has restarted it (on a node that is left) and it holds the current weights, the
        shard is played again with the same per-episode seeds, so the step trains on every episode exactly once.
        Past `max_replays` replays in one call the error goes up (the trainer's recovery, or the run ends).
        Results come back in the order of `requests`, not of completion, so that what the learner and the
        records see does not depend on which worker finished first."""
        by_uid: dict[str, list[int]] = {}
        for i, r in enumerate(requests):
            by_uid.setdefault(r["uid"], []).append(i)
        shards: list[list[int]] = [[] for _ in self.workers]
        for i, group in enumerate(by_uid.values()):
            shards[i % len(shards)].extend(group)
        pending = {self.workers[w].rollout.remote([requests[i] for i in shard], sampling, score=score): (w, shard)
                   for w, shard in enumerate(shards) if shard}
        results: list[EpisodeResult | None] = [None] * len(requests)
        replays = 0
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                w, shard = pending.pop(done[0])
                try:
                    got = ray.get(done[0])
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                    replays += 1
                    if replays > self.max_replays:
                        raise
                    lost = [requests[i] for i in shard]
                    self.replay_note(w, lost, e, score)
                    pending[self.workers[w].rollout.remote(lost, sampling, score=score)] = (w, shard)
                    continue
                for i, result in zip(shard, got, strict=True):  # a worker answers its shard in order
                    results[i] = result
                if bar is not None:
                    self.bars.advance(bar, len(shard))
        except BaseException:
            self.abandon(list(pending), requests, score)
            raise
        return [r for r in results if r is not None]

    def abandon(self, refs: list[Any], requests: list[dict[str, Any]], score: bool) -> None:
        """The call failed (the learner's node lost during a replay, a worker past its restarts): the shards still
        running are cancelled and the reward actor forgets the call's groups, so nothing of this attempt joins the
        groups of the step's re-run (the trainer's recovery plays it again under the same uids). Best effort: the
        error that ended the call is what the caller sees."""
        for ref in refs:
            try:
                ray.cancel(ref)
            except Exception:  # already finished, or its worker is gone
                pass
        if score and self.reward is not None:
            try:
                ray.get(self.reward.forget.remote(sorted({r["uid"] for r in requests})), timeout=30)
            except Exception:  # the reward actor itself may be the one that died
                pass

    def replay_note(self, w: int, lost: list[dict[str, Any]], error: Exception, score: bool) -> None:
        """Before a dead worker's shard is played again: the reward actor forgets its groups, the restarted
        worker gets the current weights; one line says what was lost and why."""
        self.replays += 1
        uids = sorted({r["uid"] for r in lost})
        why = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
        forgotten = ray.get(self.reward.forget.remote(uids)) if score and self.reward is not None else {}
        self.console.print(f"[red]rollout worker {w} died mid-rollout ({type(error).__name__}: {why}); its "
                           f"{len(lost)} episodes ({len(uids)} groups"
                           + (f"; {forgotten.get('scored', 0)} already scored, {forgotten.get('pending', 0)} "
                              "partial, taken back" if forgotten else "")
                           + ") are played again once it is back with the current weights[/]", soft_wrap=True)
        if self.resync is not None:
            self.resync()

    def sync_weights(self, learner: Any, only_stale: bool = False, adapter_only: bool = False) -> int:
        """Push the learner's weights to the workers (one object-store object read by all). A worker that is
        restarting is waited for; with `only_stale`, only workers behind the learner's version are updated
        (a restarted worker comes back with its initial weights, so it gets full weights). `adapter_only`:
        a LoRA learner sends its adapter, which workers merge into the weights of their last full sync."""
        weights = learner.get_weights.remote(adapter_only=adapter_only and not only_stale)
        workers = self.workers
        if only_stale:
            current = self.call_all([w.ready_version.remote for w in workers])
            target = ray.get(learner.version.remote())
            workers = [w for w, v in zip(workers, current, strict=True) if v != target]
            if not workers:
                return target
        return self.call_all([lambda w=w: w.load_weights_packed.remote(weights) for w in workers])[0]

    def call_all(self, calls: list[Any]) -> list[Any]:
        """ray.get of one call per actor, retrying actors that are restarting (until cluster.start_timeout_s)."""
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                return ray.get([call() for call in calls])
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)


# ---------------------------------------------------------------------- a step's results
def training_samples(results: list[EpisodeResult], balance_prefs: bool = False) -> list[TrainSample]:
    """Every turn sample of the episodes whose group gave a learning signal, carrying its episode's advantage;
    with `balance_prefs` (algo.balance_prefs, paired steps) the advantages are rescaled so that every preference
    vector carries the same total |A| (reward/advantages.balance_by_key)."""
    live = [r for r in results if r.scored is not None and not r.scored.dropped and r.scored.status == "scored"]
    advantages = [r.scored.advantage for r in live]
    if balance_prefs:
        advantages = balance_by_key(advantages, [pref_key(r.uid) for r in live])
    return [dataclasses.replace(sample, advantage=a) for r, a in zip(live, advantages, strict=True)
            for sample in episode_samples(r.traj)]


def pref_key(uid: str) -> str:
    """The preference vector of a paired group (its uid ends in -p<k>); '' for unpaired groups."""
    head, sep, k = uid.rpartition("-p")
    return k if sep and k.isdigit() else ""


def step_metrics(results: list[EpisodeResult], scored: list[Scored], current_version: int) -> dict[str, Any]:
    """A step's rollout figures (means over its episodes) and the weight-version lag of what it learned from."""
    played = [r.traj.turns[0].policy_version for r in results if r.traj.termination != "error" and r.traj.turns]
    return {"reward": mean(s.reward for s in scored), "accuracy": mean(float(s.correct) for s in scored),
            "cost_usd": mean(s.cost_usd for s in scored), "latency_s": mean(s.latency_s for s in scored),
            "format_ok": mean(float(all(t.format_ok for t in r.traj.turns)) for r in results),
            # 0 while rollouts wait for each sync (this trainer); > 0: off-policy data
            "version_lag": max([current_version - v for v in played] or [0])}


def by_preference(scored: list[Scored]) -> dict[str, dict[str, float]]:
    """With preference pairing: $ and accuracy per vector k (group uids end in -p<k>): does the policy act
    differently per vector?"""
    by_k: dict[str, list[Scored]] = {}
    for s in scored:
        by_k.setdefault(pref_key(s.uid), []).append(s)
    return {f"p{k}": {"cost_usd": mean(s.cost_usd for s in v), "accuracy": mean(float(s.correct) for s in v)}
            for k, v in sorted(by_k.items())}
