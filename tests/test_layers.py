"""The tree is the architecture: this test reads every module's imports (ast, lazy ones included) and fails on
an import across the allowed layer edges, an import cycle between modules, a module over 600 lines, or `ray`
imported outside actors/ and cluster/. Layers, bottom to top, as docs/architecture.md numbers them (a module may
import its own layer and those below):

  1 core     orchestra.*      (types, config, agent, engine, policy, data, rundir, eval, routing: no tools, no reward)
  2 tools    tools.*          } side by side: neither imports the other
  2 reward   reward.*         }
  3 actors   actors.*
  4 cluster  cluster.*
  5 bench    bench/*.py
tests/ may import anything. Why: the core runs inside verl's workers, Serve replicas and tests without Ray or
tools; a lazy import is still a dependency (it only moves the failure to run time).

Inside the core, each sub-package or top-level module stands on a floor (CORE_FLOORS, as docs/architecture.md
draws them) and imports only floors below its own; units on one floor stand side by side and import neither other:

  6 routing                       routers, their estimates, cascades, the teachers' choices
  5 policy   data   eval          the trainable model; tasks and demonstrations; evaluation
  4 agent                         the multi-turn loop, its prompt, the scripted players
  3 config   engine               the typed configuration; token generation
  2 types    rundir               the contracts; run directories
  1 preferences jsonl schema value cascade_names   grammars and formulas that import nothing of the core
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("orchestra", "tools", "reward", "actors", "cluster", "bench")
MAX_LINES = 600
RAY_ALLOWED = ("actors", "cluster", "bench")
LAYERS = {"core": 1, "tools": 2, "reward": 2, "actors": 3, "cluster": 4, "bench": 5}
CORE_FLOORS = {"preferences": 1, "jsonl": 1, "schema": 1, "value": 1, "cascade_names": 1,
               "types": 2, "rundir": 2,
               "config": 3, "engine": 3,
               "agent": 4,
               "policy": 5, "data": 5, "eval": 5,
               "routing": 6}


def layer_of(module: str) -> str:
    top = module.split(".")[0]
    return "core" if top == "orchestra" else top


def allowed(src: str, dst: str) -> bool:
    a, b = layer_of(src), layer_of(dst)
    if a == b:
        return True
    if {a, b} == {"tools", "reward"}:
        return False
    return LAYERS[b] < LAYERS[a]


def core_unit(module: str) -> str | None:
    """orchestra.<unit>[.*] -> unit; None for the package root (it only names the project)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "orchestra" and len(parts) > 1 else None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[int, str, bool]]:
    """(line, imported module of ours or `ray`, lazy?) for every import statement in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    top_level = {id(n) for n in tree.body}
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from pkg import mod` depends on pkg.mod when that is a module of ours, else on pkg
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                     for a in node.names]
        for name in names:
            if name.split(".")[0] == "ray":
                found.append((node.lineno, "ray", id(node) not in top_level))
                continue
            while name and name not in modules:  # `import a.b.c` of a package path: its longest module prefix
                name = name.rpartition(".")[0]
            if name and name.split(".")[0] in PACKAGES:
                found.append((node.lineno, name, id(node) not in top_level))
    return found


@functools.cache  # parsed once for the four tests
def _graph() -> tuple[dict[str, Path], dict[str, list[tuple[int, str, bool]]]]:
    modules = _sources()
    return modules, {m: _imports(p, modules) for m, p in modules.items()}


def _where(modules: dict[str, Path], module: str, line: int) -> str:
    return f"{modules[module].relative_to(ROOT)}:{line}"


def test_imports_follow_the_layers():
    modules, graph = _graph()
    bad = [f"{_where(modules, src, line)} {src} imports {dst}{' (lazily)' if lazy else ''}: "
           f"{layer_of(src)} may not import {layer_of(dst)}"
           for src, edges in graph.items() for line, dst, lazy in edges
           if dst != "ray" and not allowed(src, dst)]
    assert not bad, "imports across the layers (see this file's docstring):\n" + "\n".join(bad)


def test_core_floors():
    """No import runs back up inside orchestra/, and units of one floor stand side by side."""
    modules, graph = _graph()
    units = {u for m in modules if (u := core_unit(m))}
    unplaced = sorted(units - set(CORE_FLOORS))
    assert not unplaced, f"orchestra/ units without a floor: {unplaced}; add each to CORE_FLOORS (and to "\
                         "docs/architecture.md) on the floor above everything it imports"
    bad = [f"{_where(modules, src, line)} {src} (floor {CORE_FLOORS[a]}) imports {dst} (floor {CORE_FLOORS[b]})"
           f"{' (lazily)' if lazy else ''}"
           for src, edges in graph.items() if (a := core_unit(src))
           for line, dst, lazy in edges if (b := core_unit(dst)) and a != b and CORE_FLOORS[b] >= CORE_FLOORS[a]]
    assert not bad, ("imports that run back up (or sideways) inside the core: move what the lower floor needs "
                     "down, or pass it in (this file's docstring):\n" + "\n".join(bad))


def test_ray_only_in_actors_and_cluster():
    modules, graph = _graph()
    bad = [f"{_where(modules, src, line)} {src} imports ray{' (lazily)' if lazy else ''}"
           for src, edges in graph.items() for line, dst, lazy in edges
           if dst == "ray" and src.split(".")[0] not in RAY_ALLOWED]
    assert not bad, "ray is imported only in actors/ and cluster/:\n" + "\n".join(bad)


def test_no_import_cycles():
    modules, graph = _graph()
    deps = {m: sorted({dst for _, dst, _ in edges if dst != m and dst in modules}) for m, edges in graph.items()}
    cycles, state, stack = [], {}, []

    def visit(m: str) -> None:  # depth-first search; a back edge closes a cycle
        state[m] = "open"
        stack.append(m)
        for d in deps[m]:
            if state.get(d) == "open":
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(deps):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles (lazy imports count):\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_modules_stay_under_600_lines():
    modules, _ = _graph()
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p in modules.values()
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split them by role):\n" + "\n".join(long)
