"""tests/conftest.py's grouping for `make test`'s two workers: the tests it reads as using the session's Ray cluster
(by argument, through a fixture of their file, by `usefixtures`) are the ones that do, so they share one worker."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import RAY_FIXTURES, _on_ray, _ray_names, ray_tests

SOURCE = '''
import pytest

@pytest.fixture(scope="module")
def served(ray_cluster):
    yield 1

@pytest.fixture
def client(served):
    return 2

def test_direct(ray_cluster): ...
def test_through_two_fixtures(client): ...
@pytest.mark.usefixtures("toy_run")
def test_by_usefixtures(): ...
def test_plain(tmp_path): ...
class TestGroup:
    def test_method(self, served): ...
'''


def test_the_tests_reaching_the_cluster_are_found_through_fixtures_and_usefixtures():
    names = _ray_names(ast.parse(SOURCE)) - set(RAY_FIXTURES)
    assert {"test_direct", "test_through_two_fixtures", "test_by_usefixtures", "test_method"} <= names
    assert "test_plain" not in names
    ray = {"tests/x/test_a.py": names}
    assert _on_ray("tests/x/test_a.py::test_through_two_fixtures[3-cost]", ray)
    assert _on_ray("tests/x/test_a.py::TestGroup::test_method", ray)
    assert not _on_ray("tests/x/test_a.py::test_plain", ray) and not _on_ray("tests/x/test_b.py::test_direct", ray)


def test_this_repository_s_ray_tests_include_the_toy_run_readers():
    ray = ray_tests(Path(__file__).resolve().parents[1])
    assert "test_expected_value_warm_start_end_to_end" in ray["tests/cluster/test_train.py"]
    assert "test_bench_reads_a_finished_run" in ray["tests/bench/test_bench_smoke.py"]
