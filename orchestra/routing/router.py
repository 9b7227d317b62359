"""The estimator router as a policy: a fitted RouteEstimator with its task features and reward scales, saved in
a run directory (`<run_dir>/router/`) and loaded by evaluation and the Serve app.

`EstimatorRouter.plan(task)` is the route for one request under `task.pref` (milliseconds: one sentence
embedding, a few dot products); `script(task)` its tool-call texts for a scripted engine, so the router's
episodes run through the same agent loop, tools and accounting as every other policy
(orchestra/eval/runner.py `routers`, actors/serve/wiring.py `policy: estimator`). Embeddings of problems already
seen are cached per process (evaluation replays each task under several preferences and seeds).

`pick_single(task, plans, threshold)` is the same estimator restricted to single-call plans (`answer <tier>`
alone), and `single_caller(...)` its scripted engines: Serve's router mode (`policy: router`), one expert call
per request. It picks the tier with the highest expected reward under `task.pref`, or, given a threshold and two
plans [strong, weak], routes as RouteLLM's routers do. RouteLLM sends a request to the strong model when the
router's score for it (there the strong model's estimated win rate over the weak one, in [0, 1]) is at least the
threshold, so a higher threshold sends fewer requests to the strong model. The score here is
P̂(strong correct) − P̂(weak correct), in [-1, 1]; with threshold 0 the strong model gets every request on which
it is expected to be the more accurate.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestra.routing.estimator import Expected, RouteEstimator, TaskFeatures, expected_reward
from orchestra.routing.hints import attach
from orchestra.routing.plans import Plan
from orchestra.types import Task

ROUTER_DIR = "router"


@dataclass(frozen=True)
class SingleCall:
    """One request's single-call choice and the estimates behind it."""

    tier: str
    rule: str  # preference: the highest expected reward | threshold: RouteLLM's rule (module docstring)
    # per candidate tier: p_correct, cost_usd, latency_s, expected_reward (under the request's preference)
    estimates: dict[str, dict[str, float]]
    margin: float | None = None  # threshold rule: P̂(strong correct) − P̂(weak correct)
    threshold: float | None = None


class EstimatorRouter:
    def __init__(self, estimator: RouteEstimator, features: TaskFeatures, cost_scale: float, latency_scale: float,
                 cache_size: int = 4096, model_dir: str = "", embed_dtype: str = "float32"):
        self.estimator, self.features, self.model_dir, self.embed_dtype = estimator, features, model_dir, embed_dtype
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

    def attach_hints(self, tasks: Sequence[Task]) -> None:
        """Each task's estimates for the policy's prompt (agent.route_hints, orchestra/routing/hints.py)."""
        if tasks:
            attach(tasks, self.estimator.expected(self._x(tasks)), self.estimator.plans, self.cost_scale,
                   self.latency_scale)

    def script(self, task: Task) -> Any:
        """What a scripted engine plays for `task`: the chosen plan's calls, or a chosen cascade's rule."""
        from orchestra.routing.cascade import script_of

        return script_of(self.plan(task))

    # ------------------------------------------------------------ one call (Serve's router mode)
    def single_call_plans(self, tiers: Sequence[str] = (), final_tool: str = "answer") -> list[Plan]:
        """The plans that are one `final_tool` call alone: those of `tiers`, in that order, or every one. A tier
        without such a plan raises ValueError naming the ones there are."""
        single = {p.calls[0][1]: p for p in self.estimator.plans if len(p.calls) == 1 and p.calls[0][0] == final_tool}
        if not single:
            raise ValueError(f"this router has no single-call plans ({final_tool} <tier> alone) to choose among")
        unknown = [t for t in tiers if t not in single]
        if unknown:
            raise ValueError(f"tier(s) {unknown} are not single-call plans of this router; it has {list(single)}")
        return [single[t] for t in tiers] if tiers else list(single.values())

    def pick_single(self, task: Task, plans: Sequence[Plan], threshold: float | None = None) -> SingleCall:
        """The tier to call for `task` among single-call `plans` (single_call_plans), with every candidate's
        estimates; `threshold` (plans = [strong, weak]) replaces the preference by RouteLLM's rule."""
        exp = self.estimator.expected(self._x([task]))
        cols = [self.estimator.index[p.name] for p in plans]
        mine = Expected(exp.p_correct[:, cols], exp.cost_usd[:, cols], exp.latency_s[:, cols])
        ev = expected_reward(mine, plans, task.pref, self.cost_scale, self.latency_scale)[0]
        tiers = [p.name for p in plans]  # a single call's plan is named by its tier; a cascade by its rule
        estimates = {t: {"p_correct": float(mine.p_correct[0, j]), "cost_usd": float(mine.cost_usd[0, j]),
                         "latency_s": float(mine.latency_s[0, j]), "expected_reward": float(ev[j])}
                     for j, t in enumerate(tiers)}
        if threshold is None:
            return SingleCall(tiers[int(np.argmax(ev))], "preference", estimates)  # ties: the earlier plan
        if len(plans) != 2:
            raise ValueError(f"a threshold routes between two tiers [strong, weak], not {len(plans)}")
        margin = float(mine.p_correct[0, 0] - mine.p_correct[0, 1])
        return SingleCall(tiers[0] if margin >= threshold else tiers[1], "threshold", estimates, margin,
                          float(threshold))

    def single_caller(self, tokenizer: Any, eos_token_id: int, served: dict[str, str] | None = None,
                      tiers: Sequence[str] = (), threshold: float | None = None, cascades: bool = False
                      ) -> Callable[[Task], Any]:
        """task -> a scripted engine making the one call `pick_single` chooses among `tiers` (all single-call
        tiers when empty), or, with `cascades`, playing one of the router's adaptive plans when one rates higher
        (the cascade router: consult two cheap experts, escalate when they disagree; needs consult and submit
        served); the engine's `route` holds the choice and every candidate's estimates, with the expert each tier
        maps to (the response's `orchestra.router` in Serve). Refuses (ValueError, naming it) a tier this router has
        no plan for or the caller does not serve (`served`: tier -> expert)."""
        from orchestra.agent.scripted import script_engine
        from orchestra.routing.cascade import is_cascade, script_of

        plans = self.single_call_plans(tiers)
        if cascades and threshold is None:  # the adaptive plans this router was fitted with, on served tiers only
            plans += [p for p in self.estimator.plans if is_cascade(p.name)
                      and (served is None or all(t in served for _, t in p.calls))]
        unserved = [p.calls[0][1] for p in plans if served is not None and p.calls[0][1] not in served]
        if unserved:
            raise ValueError(f"router tier(s) {unserved} are not served here (served: {sorted(served or {})}); "
                             "bind them (experts=FILE) or choose others with router_tiers=[...]")
        if threshold is not None and len(plans) != 2:
            raise ValueError(f"a router threshold needs two tiers [strong, weak], got {len(plans)}")
        by_name = {p.name: p for p in plans}

        def engine(task: Task) -> Any:
            pick, mapping = self.pick_single(task, plans, threshold), task.model_mapping
            plan = by_name[pick.tier]
            out = script_engine(tokenizer, script_of(plan), eos_token_id)
            out.route = {"tier": pick.tier, "model": mapping.get(pick.tier), "rule": pick.rule,
                         "threshold": pick.threshold, "margin": pick.margin,
                         "candidates": [{"tier": t, "model": mapping.get(t), **e} for t, e in pick.estimates.items()]}
            if is_cascade(plan.name):  # an adaptive plan: its experts; what it did is in the trace (consults, then
                # submit or an escalating answer call)
                out.route.update(kind="cascade", models={t: mapping.get(t) for _, t in plan.calls})
            return out

        return engine

    # ------------------------------------------------------------ files
    def save(self, run_dir: str | Path) -> Path:
        spec = {"features": {"kind": "minilm", "model_dir": self.model_dir, "dtype": self.embed_dtype,
                             "meta_keys": self.features.meta_keys, "vocab": self.features.vocab,
                             "text_stats": self.features.text_stats},
                "cost_scale": self.cost_scale, "latency_scale": self.latency_scale}
        return self.estimator.save(Path(run_dir) / ROUTER_DIR, extra=spec)

    @classmethod
    def load(cls, run_dir: str | Path, embedder: Callable[[str, str], Any]) -> EstimatorRouter:
        """From `<run_dir>/router/` (or that directory itself). `embedder(model_dir, dtype)` gives the text
        embedding the router was fitted with, from the model dir and precision it saved (float32 for routers
        saved before the precision was; tools.retrieval.dense.embed_texts: the core does not load models of
        tools/)."""
        d = Path(run_dir)
        d = d if (d / "estimator.json").is_file() else d / ROUTER_DIR
        estimator, meta = RouteEstimator.load(d)
        f = meta.get("features", {})
        if f.get("kind", "minilm") != "minilm":
            raise ValueError(f"{d}: unknown feature kind {f.get('kind')!r} (this version embeds with minilm)")
        dtype = f.get("dtype", "float32")
        features = TaskFeatures(embedder(f.get("model_dir", ""), dtype), f.get("meta_keys", []),
                                f.get("vocab", {}), text_stats=bool(f.get("text_stats", False)))  # older: none
        return cls(estimator, features, meta.get("cost_scale", 0.01), meta.get("latency_scale", 10.0),
                   model_dir=f.get("model_dir", ""), embed_dtype=dtype)


def has_router(run_dir: str | Path) -> bool:
    d = Path(run_dir)
    return (d / ROUTER_DIR / "estimator.json").is_file() or (d / "estimator.json").is_file()


def find_router(path: str | Path) -> Path | None:
    """The run dir holding a router: `path` itself or one of its three nearest parents (a checkpoint lies in
    `<run_dir>/checkpoints/step_N/`); None when none has one."""
    p = Path(path)
    return next((d for d in (p, *p.parents[:3]) if has_router(d)), None)
