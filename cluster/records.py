"""Episode records as a training run plays them, for cluster/replay.py (the format: orchestra/rundir/records.py).

`EpisodeRecorder.write` stores one record per episode of a step or an evaluation (the request, sampling settings
with the episode's seed, the trajectory, its score and its tool catalogue by hash); with `log.replay_weights`,
`keep_weights` saves the weights of every policy version before it plays. Records are a debugging aid: a
failure here is reported and never stops training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ray

from actors.rollout_worker import EpisodeResult
from orchestra.rundir.records import EpisodeLog, episode_record, save_weights
from orchestra.types import Task
from reward.score import Scored


class EpisodeRecorder:
    def __init__(self, cfg: Any, run_dir: Path, tool_handles: dict[str, Any], console: Any):
        self.enabled, self.replay_weights = cfg.log.episodes, cfg.log.episodes and cfg.log.replay_weights
        self.dir, self.tool_handles, self.console = run_dir, tool_handles, console
        self.timeout_s = cfg.zoo.server.timeout_s
        self._log: EpisodeLog | None = None  # opened at the first record
        self._schemas: Any = None
        self.kept_versions: set[int] = set()  # policy versions whose weights this process saved

    def write(self, name: str, kind: str, step: int, requests: list[dict[str, Any]], results: list[EpisodeResult],
              scored: list[Scored], sampling: dict[str, Any]) -> None:
        """One record per episode that was played (a dead worker's episodes generated nothing to replay)."""
        if not self.enabled:
            return
        from actors.tool_client import RayToolClient

        try:
            if self._log is None:
                self._log = EpisodeLog(self.dir)
                self._schemas = RayToolClient(self.tool_handles, timeout_s=self.timeout_s)
            by_id = {r["episode_id"]: r for r in requests}
            records = []
            for res, s in zip(results, scored, strict=True):
                req = by_id.get(res.traj.episode_id)
                if req is None:
                    continue
                key = self._log.schema_key(self._schemas.schemas(Task.from_dict(req["task"])))
                records.append(episode_record(kind, step, req, sampling, res.traj.to_dict(), s.to_dict(), key))
            self._log.write(name, records)
        except Exception as e:
            self.console.print(f"[yellow]episode records for {name} not written: {type(e).__name__}: {e}[/]")

    def keep_weights(self, learner: Any) -> None:
        """With log.replay_weights, save the weights the coming rollouts run on (once per version and process:
        a step re-run after a restore may reach the same version number with other weights)."""
        if not self.replay_weights:
            return
        try:
            if ray.get(learner.version.remote()) not in self.kept_versions:
                version, state = ray.get(learner.get_weights.remote())
                save_weights(self.dir, version, state)
                self.kept_versions.add(version)
        except Exception as e:  # replay will name the version it lacks; the run goes on
            self.console.print(f"[yellow]weights for replay not saved: {type(e).__name__}: {e}[/]")
