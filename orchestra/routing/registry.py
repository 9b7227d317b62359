"""The routing policies by name: the one registry that evaluation (cluster/evaluate.py, cluster/eval_policies.py,
cluster/heldout.py), Serve (actors/serve/api.py, actors/serve/wiring.py), the warm start
(cluster/teachers/expected_value.py) and the comparison on recorded outcomes (orchestra/routing/holdout.py) read.
A new routing policy is one file (its router, with the hooks below) and one entry of POLICIES.

Three kinds:
  model    the orchestrator LLM: the evaluated checkpoint (`orchestrator`), the untrained base (`base`), the served
           policy (`model`). Its engine is the caller's to build (cluster/eval_policies.py, actors/serve/wiring.py):
           named here, built there.
  fixed    a rule that ignores the preference, scripted per task by the evaluator (orchestra/eval/baselines.py, whose
           BASELINES list they are); `replay_only`: offered by default only where the zoo replays recorded outcomes.
  learned  fitted on exploration outcomes (`fit`, on an Explored set; `expected`: its estimates, which the held-out
           comparison judges). A run keeps the ones with `save` in its run dir (the expected-value warm start fits
           and saves them); evaluation and Serve find them there (`saved`, `load`) and play their routes
           (Router.script per task under its preference; in Serve, `serve` gives task -> engine).
`where` says which surfaces offer a policy: eval (cluster.evaluate's policies), serve (ServeSettings.policy), holdout
(holdout.compare's routers). Order matters: listings, report rows and the comparison's lines follow POLICIES'.
Pieces above the core (a Ray-backed router) register with `register` from cluster/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from orchestra.eval.baselines import BASELINES
from orchestra.routing.estimator import Expected, RouteEstimator, TaskFeatures
from orchestra.routing.family import FamilyRouter
from orchestra.routing.plans import Outcome, Plan
from orchestra.routing.router import EstimatorRouter, has_router
from orchestra.types import Task

KINDS = ("model", "fixed", "learned")
SURFACES = ("eval", "serve", "holdout")
Embedder = Callable[[str, str], Any]  # (model dir, dtype) -> text embedding: tools.retrieval.dense.embed_texts


class Router(Protocol):
    """A learned policy loaded from a run dir: what a scripted engine plays for a task under `task.pref` (a list of
    tool-call texts, or a rule reading the prompt: orchestra/agent/scripted.py)."""

    def script(self, task: Task) -> Any: ...


@dataclass(frozen=True)
class Explored:
    """What a learned policy is fitted on: explored tasks (the rows of X, their features), the plans played and
    their outcomes, and the run's fit settings (router.C, router.alpha, router.select_by; the estimator's)."""

    tasks: Sequence[Task]
    X: np.ndarray
    plans: Sequence[Plan]
    outcomes: Sequence[Outcome]
    n_meta: int = 0  # one-hot task-metadata columns after the embedding (TaskFeatures.n_meta)
    n_stats: int = 0  # text-statistics columns after those (TaskFeatures.n_stats)
    seed: int = 0
    C: float = 1.0
    alpha: float = 1.0
    select_by: str = "log_loss"


@dataclass(frozen=True)
class Keeping:
    """What a run saves beside a fitted policy so that evaluation and Serve rebuild its task features and reward."""

    features: TaskFeatures
    cost_scale: float
    latency_scale: float
    model_dir: str = ""  # the text embedding's model dir and precision (router.embed_dtype)
    embed_dtype: str = "float32"


@dataclass(frozen=True)
class Serving:
    """What a Serve policy's engine may use: `scripted(script)` is a scripted engine of the served tokenizer; the
    served tier -> expert mapping and tools; ServeSettings' router_tiers and router_threshold."""

    scripted: Callable[[Any], Any]
    tokenizer: Any
    eos_token_id: int
    tiers: dict[str, str] | None = None
    tools: Sequence[str] = ()
    router_tiers: Sequence[str] = ()
    threshold: float | None = None


@dataclass(frozen=True)
class RoutingPolicy:
    """One routing policy: its name, kind, a line saying what it is, where it is offered, and the hooks of its kind
    (module docstring); a hook it does not have is None."""

    name: str
    kind: str  # model | fixed | learned
    about: str
    where: tuple[str, ...]
    replay_only: bool = False
    fit: Callable[[Explored], Any] | None = None
    expected: Callable[[Any, Sequence[Task], np.ndarray], Expected] | None = None  # (fitted, tasks, their X)
    save: Callable[[Any, Keeping, Path], Path] | None = None  # (fitted, keeping, run dir) -> where it went
    saved: Callable[[Path], bool] | None = None  # whether a dir holds it
    load: Callable[[Path, Embedder], Router] | None = None
    serve: Callable[[Router, Serving], Callable[[Task], Any]] | None = None  # -> task -> engine


# ---------------------------------------------------------------- the hooks of the policies registered here
def _fit_estimator(e: Explored) -> RouteEstimator:
    """The estimator router as runs fit it: per-run model selection (orchestra/routing/select.py)."""
    return RouteEstimator(e.plans, C=e.C, alpha=e.alpha, seed=e.seed, select_by=e.select_by).fit(
        e.X, [t.id for t in e.tasks], e.outcomes, e.n_meta, e.n_stats)


def _fit_estimator_routing(e: Explored) -> RouteEstimator:
    return _fit_estimator(replace(e, select_by="routing"))


def _fit_estimator_before(e: Explored) -> RouteEstimator:
    """What runs fitted before the selection existed: logistic regression at C = 1 on every feature."""
    return RouteEstimator(e.plans, C=1.0, select=False).fit(e.X, [t.id for t in e.tasks], e.outcomes,
                                                            n_stats=e.n_stats)


def _fit_family(e: Explored) -> FamilyRouter:
    return FamilyRouter(e.plans).fit(e.tasks, e.outcomes)


def _by_features(fitted: Any, _tasks: Sequence[Task], X: np.ndarray) -> Expected:
    return fitted.expected(X)


def _by_task(fitted: Any, tasks: Sequence[Task], _X: np.ndarray) -> Expected:
    return fitted.expected(tasks)


def _save_estimator(fitted: RouteEstimator, k: Keeping, run_dir: Path) -> Path:
    return EstimatorRouter(fitted, k.features, k.cost_scale, k.latency_scale, model_dir=k.model_dir,
                           embed_dtype=k.embed_dtype).save(run_dir)


def _serve_routes(router: Router, s: Serving) -> Callable[[Task], Any]:
    """The whole route the router picks under the request's preference, played by a scripted engine."""
    return lambda task: s.scripted(router.script(task))


def _serve_one_call(router: Any, s: Serving) -> Callable[[Task], Any]:
    """One answer call of the tier the router picks, or, where the served catalogue lets a route read answers
    (consult and submit), one of its adaptive plans when that rates higher: the cascade router."""
    return router.single_caller(s.tokenizer, s.eos_token_id, s.tiers, s.router_tiers, s.threshold,
                                cascades={"consult", "submit"} <= set(s.tools))


_ESTIMATOR_FILES = {"saved": has_router, "load": EstimatorRouter.load}  # <run dir>/router/, written by _save_estimator
_FIXED_ABOUT = {"strongest": "always the priciest answer tier", "cheapest": "always the cheapest answer tier",
                "random": "a random answer tier per task", "heuristic": "family keywords -> tiers",
                "oracle": "the cheapest tier recorded right (replay zoos)"}

POLICIES: list[RoutingPolicy] = [
    RoutingPolicy("orchestrator", "model", "the evaluated checkpoint", ("eval",)),
    RoutingPolicy("model", "model", "the served model", ("serve",)),
    RoutingPolicy("estimator", "learned", "the run's estimator router", ("eval", "serve", "holdout"),
                  fit=_fit_estimator, expected=_by_features, save=_save_estimator, serve=_serve_routes,
                  **_ESTIMATOR_FILES),
    RoutingPolicy("router", "learned", "the run's estimator router, one call (a cascade where consult and submit "
                  "are served)", ("serve",), serve=_serve_one_call, **_ESTIMATOR_FILES),
    RoutingPolicy("estimator_routing", "learned", "the estimator selected by cross-validated routing value",
                  ("holdout",), fit=_fit_estimator_routing, expected=_by_features),
    RoutingPolicy("estimator_before", "learned", "the estimator without selection (logistic, C = 1)", ("holdout",),
                  fit=_fit_estimator_before, expected=_by_features),
    RoutingPolicy("family", "learned", "the per-family fixed router (orchestra/routing/family.py)", ("holdout",),
                  fit=_fit_family, expected=_by_task),
    *(RoutingPolicy(name, "fixed", _FIXED_ABOUT.get(name, "a fixed baseline"), ("eval",),
                    replay_only=name == "oracle") for name in BASELINES),
    RoutingPolicy("base", "model", "the untrained base policy", ("eval",)),
]


# ---------------------------------------------------------------- lookups
def register(policy: RoutingPolicy) -> None:
    """Add a policy (appended: it lists last). Refuses a name already taken, an unknown kind or surface, and a
    learned policy without what its surfaces need."""
    if any(p.name == policy.name for p in POLICIES):
        raise ValueError(f"routing policy {policy.name!r} is registered already")
    if policy.kind not in KINDS or not set(policy.where) <= set(SURFACES):
        raise ValueError(f"routing policy {policy.name!r}: kind must be one of {KINDS} and where among {SURFACES}, "
                         f"got {policy.kind!r}, {policy.where}")
    needs = {"holdout": ("fit", "expected"), "eval": ("saved", "load"), "serve": ("saved", "load", "serve")}
    missing = [h for s in policy.where for h in needs[s] if policy.kind == "learned" and getattr(policy, h) is None]
    if missing:
        raise ValueError(f"learned routing policy {policy.name!r} offered in {policy.where} needs {sorted(set(missing))}")
    POLICIES.append(policy)


def among(where: str, kind: str | None = None) -> list[RoutingPolicy]:
    """The policies offered on a surface (of one kind), in registry order."""
    return [p for p in POLICIES if where in p.where and (kind is None or p.kind == kind)]


def names(where: str, kind: str | None = None) -> list[str]:
    return [p.name for p in among(where, kind)]


def get(name: str, where: str | None = None) -> RoutingPolicy:
    """The policy `name` (offered on `where` when given); ValueError naming the ones there are."""
    for p in POLICIES:
        if p.name == name and (where is None or where in p.where):
            return p
    choices = names(where) if where else [p.name for p in POLICIES]
    raise ValueError(f"unknown routing policy {name!r}{f' for {where}' if where else ''}; choose one of {choices}")


def kept() -> list[RoutingPolicy]:
    """The learned policies a run fits on its exploration and saves in its run dir."""
    return [p for p in POLICIES if p.kind == "learned" and p.save is not None]


def find_saved(path: str | Path, policies: Sequence[RoutingPolicy]) -> Path | None:
    """The run dir holding any of `policies`: `path` itself or one of its three nearest parents (a checkpoint lies
    in `<run_dir>/checkpoints/step_N/`); None when none holds one."""
    p = Path(path)
    return next((d for d in (p, *p.parents[:3]) if any(q.saved is not None and q.saved(d) for q in policies)), None)


def load_saved(run_dir: str | Path, embedder: Embedder, policies: Sequence[RoutingPolicy]) -> dict[str, Router]:
    """name -> router for each of `policies` saved in `run_dir`, in registry order; {} when it holds none."""
    d = Path(run_dir)
    return {p.name: p.load(d, embedder) for p in policies if p.load is not None and p.saved is not None
            and p.saved(d)}
