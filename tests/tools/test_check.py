"""tools/check.py: this package's tools pass; tools that break the contract are each caught."""

from __future__ import annotations

from typing import Any

import pytest

from orchestra.types import ToolResult
from tests.helpers.fakes import FakeTool
from tools.check import check_registry, check_tool, main, own_tools


class Strict(FakeTool):
    """A well-behaved fake: requires `query` and returns an error result for bad arguments."""

    def __init__(self, name: str = "strict", **kw: Any):
        super().__init__(name, parameters={"type": "object", "properties": {"query": {"type": "string"}},
                                           "required": ["query"]}, **kw)

    def example_args(self) -> dict[str, Any]:
        return {"query": "hello"}

    async def call(self, args, ctx):
        if not isinstance(args.get("query"), str):
            return ToolResult.failure("strict: query must be a string")
        return await super().call(args, ctx)


class RaisesOnBadArgs(Strict):
    async def call(self, args, ctx):
        return ToolResult(text=args["query"].upper())  # KeyError / AttributeError on bad input


class AcceptsAnything(Strict):
    async def call(self, args, ctx):
        return ToolResult(text="fine")


class BadSchema(Strict):
    def __init__(self):
        super().__init__("bad_schema")
        self.parameters = {"type": "object", "properties": {"query": {"type": "strng"}}, "required": ["query"]}


class Overcharges(Strict):
    def cost_bound(self, args, ctx):
        return 0.001

    async def call(self, args, ctx):
        if not isinstance(args.get("query"), str):
            return ToolResult.failure("bad")
        return ToolResult(text="x", cost_usd=0.01)


class Negative(Strict):
    async def call(self, args, ctx):
        if not isinstance(args.get("query"), str):
            return ToolResult.failure("bad")
        return ToolResult(text="x", cost_usd=-1.0)


def _python_problems() -> list[str]:
    """What the checker must say of the python tool here: nothing, or (a host without bubblewrap or the
    syscall filter) that the sandbox refused, which is the tool working as promised, not a contract break."""
    from tools.sandbox import REFUSED, Sandbox

    return [f"example call failed: python: {REFUSED}"] if Sandbox().shortfall else []


def test_own_tools_pass():
    report = check_registry(own_tools())
    assert set(report) == {"python", "calculator", "retrieve", "web_search"}
    assert report == {name: _python_problems() if name == "python" else [] for name in report}


def test_strict_mode_reports_offline_network_tool(monkeypatch):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    from tools.web_search import WebSearch

    problems = check_tool(WebSearch(cache_dir=""), offline_ok=False)
    assert problems and "example call failed" in problems[0] and "TAVILY_API_KEY" in problems[0]


@pytest.mark.parametrize("tool, expected", [
    (RaisesOnBadArgs(), "raised"),
    (AcceptsAnything(), "succeeded; bad arguments"),
    (BadSchema(), "not a valid JSON schema"),
    (Overcharges(), "exceeds cost_bound"),
    (Negative(), "cost_usd must be a finite number >= 0"),
    (FakeTool("no_example"), "missing example_args"),
    (Strict(fail=True), "example call failed"),
    (object(), "`name` must be a non-empty string"),
])
def test_broken_tools_are_caught(tool, expected):
    problems = check_tool(tool)
    assert any(expected in p for p in problems), problems


def test_good_fake_passes_and_registry_names_must_match():
    assert check_tool(Strict()) == []
    report = check_registry({"strict": Strict(), "alias": Strict()})
    assert report["strict"] == [] and "registered as 'alias'" in report["alias"][0]


async def test_check_tool_works_inside_an_event_loop():
    assert check_tool(Strict()) == []


def test_cli_own(capsys):
    refused = bool(_python_problems())
    assert main(["--own"]) == int(refused)
    assert f"{4 - refused}/4 tools pass" in capsys.readouterr().out
