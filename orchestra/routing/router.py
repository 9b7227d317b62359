"""The estimator router as a policy: a fitted RouteEstimator with its task features and reward scales, saved in
a run directory (`<run_dir>/router/`) and loaded by evaluation and the Serve app.

`EstimatorRouter.plan(task)` is the route for one request under `task.pref` (milliseconds: one sentence
embedding, a few dot products); `script(task)` its tool-call texts for a scripted engine, so the router's
episodes run through the same agent loop, tools and accounting as every other policy
(orchestra/eval/runner.py `routers`, actors/serve/app.py `policy: estimator`).
Embeddings of problems already seen are cached per process (evaluation replays each task under several
preferences and seeds).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.routing.estimator import RouteEstimator, TaskFeatures
from orchestra.routing.plans import Plan
from orchestra.types import Task

ROUTER_DIR = "router"


class EstimatorRouter:
    def __init__(self, estimator: RouteEstimator, features: TaskFeatures, cost_scale: float, latency_scale: float,
                 cache_size: int = 4096, model_dir: str = ""):
        self.estimator, self.features, self.model_dir = estimator, features, model_dir
        self.cost_scale, self.latency_scale = float(cost_scale), float(latency_scale)
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self.cache_size = int(cache_size)

    def _x(self, tasks: Sequence[Task]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(t.problem for t in tasks) if t not in self._rows]
        if todo:
            by_text = {t.problem: t for t in tasks}
            for text, row in zip(todo, self.features([by_text[p] for p in todo]), strict=True):
                self._rows[text] = row
                if len(self._rows) > self.cache_size:
                    self._rows.popitem(last=False)
        return np.stack([self._rows[t.problem] for t in tasks])

    def plans(self, tasks: Sequence[Task]) -> list[Plan]:
        """The best plan for each task under its own `pref`."""
        return self.estimator.choose(self._x(tasks), [t.pref for t in tasks], self.cost_scale, self.latency_scale)

    def plan(self, task: Task) -> Plan:
        return self.plans([task])[0]

    def script(self, task: Task) -> list[str]:
        return self.plan(task).texts()

    # ------------------------------------------------------------ files
    def save(self, run_dir: str | Path) -> Path:
        spec = {"features": {"kind": "minilm", "model_dir": self.model_dir, "meta_keys": self.features.meta_keys,
                             "vocab": self.features.vocab},
                "cost_scale": self.cost_scale, "latency_scale": self.latency_scale}
        return self.estimator.save(Path(run_dir) / ROUTER_DIR, extra=spec)

    @classmethod
    def load(cls, run_dir: str | Path, embedder: Callable[[str], Any]) -> EstimatorRouter:
        """From `<run_dir>/router/` (or that directory itself). `embedder(model_dir)` gives the text embedding the
        router was fitted with, from the model dir it saved (tools.retrieval.dense.embed_texts: the core does not
        load models of tools/)."""
        d = Path(run_dir)
        d = d if (d / "estimator.json").is_file() else d / ROUTER_DIR
        estimator, meta = RouteEstimator.load(d)
        f = meta.get("features", {})
        if f.get("kind", "minilm") != "minilm":
            raise ValueError(f"{d}: unknown feature kind {f.get('kind')!r} (this version embeds with minilm)")
        features = TaskFeatures(embedder(f.get("model_dir", "")), f.get("meta_keys", []),
                                f.get("vocab", {}))
        return cls(estimator, features, meta.get("cost_scale", 0.01), meta.get("latency_scale", 10.0),
                   model_dir=f.get("model_dir", ""))


def has_router(run_dir: str | Path) -> bool:
    d = Path(run_dir)
    return (d / ROUTER_DIR / "estimator.json").is_file() or (d / "estimator.json").is_file()


def find_router(path: str | Path) -> Path | None:
    """The run dir holding a router: `path` itself or one of its three nearest parents (a checkpoint lies in
    `<run_dir>/checkpoints/step_N/`); None when none has one."""
    p = Path(path)
    return next((d for d in (p, *p.parents[:3]) if has_router(d)), None)
