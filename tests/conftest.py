"""Shared test setup: offline, CPU-only, one local Ray cluster per test session (started on first use)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# One BLAS/torch thread per process (torch reads this at import): tests run many small processes (Ray actors)
# on 2 cores, where spinning OpenMP threads make the tiny model's small matmuls tens of times slower.
# Ray workers inherit this environment.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

SHARED_DATA = Path(os.environ.get("ORCHESTRA_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


NO_SHARED_DATA = (f"shared data not found at {SHARED_DATA}: the data-backed tests read public benchmark files and "
                  "recordings (where to get each: docs/data.md, 'Shared benchmark files and recordings'); put them "
                  "there or set ORCHESTRA_SHARED_DATA=<dir>")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(NO_SHARED_DATA)
    return SHARED_DATA


def _shared_data_summary(terminalreporter) -> None:
    """Said once at the end, not only in -rs output: how many data-backed tests did not run, and how to run them."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if NO_SHARED_DATA in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} data-backed tests skipped: {NO_SHARED_DATA}", yellow=True)


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster for the whole session; tests that need Ray take this fixture."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local",  # our own cluster, even beside one that `ray start` left running
                 num_cpus=64,  # logical CPUs: tests keep many small actors alive at once
                 object_store_memory=256 * 1024**2, include_dashboard=False,
                 namespace="orchestra-tests", log_to_driver=False, configure_logging=False,
                 # metrics reach the export port within ~1 s, not 10 (tests/actors/test_metrics.py polls it)
                 _system_config={"metrics_report_interval_ms": 1000})
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def toy_run(ray_cluster, tmp_path_factory):
    """cpu_tiny's recipe (`make train`'s: exploration, estimator router, expected-value warm start, paired GRPO,
    held-out presets and sweep) at toy size through the real actors, trained once a session: (run dir, summary).
    tests/cluster/test_train.py checks the run; tests/bench/test_bench_smoke.py has bench/seeds.py and
    bench/rl_value.py read it as a finished run."""
    from cluster.trainer import Trainer
    from tests.cluster.test_train import EXPECTED_VALUE, small_cfg

    trainer = Trainer(small_cfg(tmp_path_factory.mktemp("toy_run"), *EXPECTED_VALUE))
    try:
        summary = trainer.fit()
    finally:
        trainer.close()
    return trainer.dir, summary


# ---------------------------------------------------------------- chaos suite (tests/cluster/test_chaos.py)
CHAOS: list[dict] = []  # one record per killed actor kind: survived, unaccounted episodes, hangs, recovery time


@pytest.fixture
def chaos_record():
    """Record one kill's outcome; the terminal summary prints a `CHAOS <kind> ...` line per record."""
    def record(kind: str, *, survived: bool, unaccounted: int = 0, hang: int = 0, recover_s: float = 0.0) -> None:
        CHAOS.append({"kind": kind, "survived": int(survived), "unaccounted": unaccounted, "hang": hang,
                      "recover_s": recover_s})
    return record


def pytest_terminal_summary(terminalreporter):
    _shared_data_summary(terminalreporter)
    if not CHAOS:
        return
    tr = terminalreporter
    tr.section("chaos")
    for r in CHAOS:
        tr.write_line(f"CHAOS {r['kind']} survived={r['survived']} unaccounted={r['unaccounted']} hang={r['hang']} "
                      f"recover_s={r['recover_s']:.1f}")
    every = all(r["survived"] for r in CHAOS)
    lost, hangs = sum(r["unaccounted"] for r in CHAOS), sum(r["hang"] for r in CHAOS)
    times = ", ".join(f"{r['kind']} {r['recover_s']:.1f}s" for r in CHAOS)
    tr.write_line(f"Chaos: {'every' if every else 'NOT every'} actor kind survived, {lost} episodes unaccounted, "
                  f"{hangs} hangs; time to recover per kind: {times}")


# ---------------------------------------------------------------- two workers, one Ray cluster (make test)
RAY_FIXTURES = ("ray_cluster", "toy_run")  # the session's Ray fixtures (above)


def _ray_names(tree: ast.Module) -> set[str]:
    """Names in one test module that reach a session Ray fixture: the fixtures themselves, module fixtures asking
    for one (transitively), and tests asking for any of those (by argument or `usefixtures`)."""
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]

    def wants(fn) -> set[str]:
        used = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Call) and "usefixtures" in ast.unparse(dec.func):
                used |= {a.value for a in dec.args if isinstance(a, ast.Constant)}
        return used

    ray, grew = set(RAY_FIXTURES), True
    while grew:
        before = len(ray)
        ray |= {fn.name for fn in funcs if wants(fn) & ray}
        grew = len(ray) > before
    return ray


def ray_tests(root: Path) -> dict[str, set[str]]:
    """{test file (rootdir-relative, as in node ids): its test functions on the session's Ray cluster}."""
    out = {}
    for path in (root / "tests").rglob("test_*.py"):
        text = path.read_text(encoding="utf-8")
        if any(name in text for name in RAY_FIXTURES):
            out[path.relative_to(root).as_posix()] = _ray_names(ast.parse(text)) - set(RAY_FIXTURES)
    return out


def _on_ray(nodeid: str, ray: dict[str, set[str]]) -> bool:
    file, _, rest = nodeid.partition("::")
    return rest.split("[")[0].split("::")[-1] in ray.get(file, ())


def pytest_xdist_make_scheduler(config, log):
    """`make test` runs two pytest-xdist workers with `--dist loadgroup`: the tests on the session's Ray cluster are
    one work unit on one worker (xdist hands out units with the most tests first; this one, ~50, leads), which
    starts the one cluster and trains `toy_run` once; every other test file is a unit of its own on either worker
    (its module fixtures set up once). xdist's own `xdist_group` marks do not work under pytest 9.2: its scheduler
    reads a node-id suffix pytest no longer lets a plugin set."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    ray = ray_tests(config.rootpath)

    class RayOnOneWorker(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "ray" if _on_ray(nodeid, ray) else nodeid.split("::")[0]

    return RayOnOneWorker(config, log)


def pytest_collection_modifyitems(config, items):
    """The grouping above reads the test files' source; a test reaching the cluster in a way it does not see would
    start a second cluster on the other worker, so that is an error here, naming the test."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    ray = ray_tests(config.rootpath)
    stray = [i.nodeid for i in items if set(RAY_FIXTURES) & set(getattr(i, "fixturenames", ()))
             and not _on_ray(i.nodeid, ray)]
    if stray:
        raise pytest.UsageError(f"{stray[0]} uses the session's Ray cluster in a way tests/conftest.py's grouping "
                                f"does not see: ask for {RAY_FIXTURES[0]} (or a fixture of the same file that does)")
