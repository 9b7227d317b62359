"""Conformance checks for tools: does each registered tool keep the Tool contract (tools/base.py)?

`check_tool(tool)` returns a list of problems (empty = fine):
* name, description and a `parameters` JSON schema that is valid under the JSON Schema meta-schema and
  describes an object; `schema(task)` is an OpenAI function schema carrying the same name;
* `example_args()` exists, validates against the schema, and the example call returns a ToolResult that
  succeeds (a tool with `needs_network = True` may fail offline; that is reported only when `offline_ok`
  is False), with cost >= 0, cost <= cost_bound, latency >= 0;
* bad arguments ({} and a wrong-typed required field), sent straight to `tool.call` without guarded_call's
  validation, give an error result, never an exception and never a success.
`check_registry(tools)` runs it over a name -> tool dict. `python -m tools.check` checks the registry's
default zoo (tools.registry.build_tools, imported lazily) or, while there is none, this package's own tools.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import sys
from typing import Any

from orchestra.schema import check_arguments
from orchestra.types import Task, ToolContext, ToolResult
from tools.base import Tool, guarded_call

_WRONG_TYPE = {"string": 12345, "integer": "not a number", "number": "not a number", "boolean": "maybe",
               "array": "not a list", "object": "not an object"}


def _run(coro):
    """Run a coroutine to completion, also from inside a running event loop (pytest-asyncio, notebooks)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _context() -> ToolContext:
    return ToolContext(task=Task(id="tool-check", problem="What is the capital of France?", answer="Paris"),
                       episode_id="tool-check")


def _static_problems(tool: Any) -> list[str]:
    problems = []
    for attr in ("name", "description"):
        if not isinstance(getattr(tool, attr, None), str) or not getattr(tool, attr):
            problems.append(f"`{attr}` must be a non-empty string")
    params = getattr(tool, "parameters", None)
    if not isinstance(params, dict):
        return problems + ["`parameters` must be a JSON schema dict"]
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(params)
    except jsonschema.SchemaError as e:
        problems.append(f"parameters is not a valid JSON schema: {e.message}")
    if params.get("type") != "object":
        problems.append("parameters must describe an object (type: object)")
    if not isinstance(tool, Tool):
        problems.append("does not implement the Tool protocol (name, description, parameters, schema, "
                        "cost_bound, call)")
        return problems
    try:
        fn = tool.schema(None).get("function", {})
        if fn.get("name") != tool.name or not isinstance(fn.get("parameters"), dict):
            problems.append("schema() must return {type: function, function: {name, description, parameters}}")
    except Exception as e:
        problems.append(f"schema() raised {type(e).__name__}: {e}")
    return problems


def _result_problems(result: Any, bound: float) -> list[str]:
    if not isinstance(result, ToolResult):
        return [f"call returned {type(result).__name__}, not a ToolResult"]
    problems = []
    if not (isinstance(result.cost_usd, (int, float)) and math.isfinite(result.cost_usd) and result.cost_usd >= 0):
        problems.append(f"cost_usd must be a finite number >= 0, got {result.cost_usd!r}")
    elif result.cost_usd > bound + 1e-12:
        problems.append(f"cost ${result.cost_usd} exceeds cost_bound ${bound}")
    if not (isinstance(result.latency_s, (int, float)) and result.latency_s >= 0):
        problems.append(f"latency_s must be >= 0, got {result.latency_s!r}")
    if not isinstance(result.text, str):
        problems.append("result text must be a string")
    return problems


def _bad_arguments(params: dict[str, Any]) -> list[dict[str, Any]]:
    bad: list[dict[str, Any]] = []
    required = params.get("required") or []
    if required:
        bad.append({})
        field = required[0]
        kind = (params.get("properties", {}).get(field) or {}).get("type")
        if kind in _WRONG_TYPE:
            bad.append({field: _WRONG_TYPE[kind]})
    return bad


async def acheck_tool(tool: Any, ctx: ToolContext | None = None, offline_ok: bool = True) -> list[str]:
    """The checks of `check_tool`, for callers already in an event loop."""
    problems = _static_problems(tool)
    if problems:
        return problems
    ctx = ctx or _context()
    example = getattr(tool, "example_args", None)
    if not callable(example):
        problems.append("missing example_args()")
    else:
        args = example()
        invalid = check_arguments(tool.parameters, args)
        if invalid:
            problems.append(f"example_args() do not match the schema: {invalid}")
        else:
            try:
                bound = float(tool.cost_bound(args, ctx))
            except Exception as e:
                bound = math.inf
                problems.append(f"cost_bound raised {type(e).__name__}: {e}")
            if bound < 0:
                problems.append(f"cost_bound is negative ({bound})")
            result = await guarded_call(tool, args, ctx)
            problems += _result_problems(result, bound)
            if isinstance(result, ToolResult) and not result.ok:
                if not (offline_ok and getattr(tool, "needs_network", False)):
                    problems.append(f"example call failed: {result.error}")
    for bad in _bad_arguments(tool.parameters):
        try:
            result = await tool.call(bad, ctx)
        except Exception as e:
            problems.append(f"call({bad}) raised {type(e).__name__} instead of returning an error result")
            continue
        if not isinstance(result, ToolResult):
            problems.append(f"call({bad}) returned {type(result).__name__}, not a ToolResult")
        elif result.ok:
            problems.append(f"call({bad}) succeeded; bad arguments must give an error result")
    return problems


def check_tool(tool: Any, ctx: ToolContext | None = None, offline_ok: bool = True) -> list[str]:
    """Problems with `tool` (empty list: it keeps the contract). Never raises for a broken tool."""
    try:
        return _run(acheck_tool(tool, ctx, offline_ok))
    except Exception as e:  # a tool so broken that the checker itself tripped
        return [f"check crashed: {type(e).__name__}: {e}"]


def check_registry(tools: dict[str, Any], offline_ok: bool = True) -> dict[str, list[str]]:
    """name -> problems for every tool; a key that differs from the tool's own name is a problem too."""
    report = {}
    for key, tool in tools.items():
        problems = check_tool(tool, offline_ok=offline_ok)
        if getattr(tool, "name", key) != key:
            problems.insert(0, f"registered as {key!r} but named {getattr(tool, 'name', None)!r}")
        report[key] = problems
    return report


def _demo_retriever() -> Any:
    from tools.retrieval.bm25 import BM25Index
    from tools.retrieval.retriever import Retriever

    demo = [{"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
            {"id": "fuji", "title": "Mount Fuji", "text": "Mount Fuji is the highest mountain in Japan."},
            {"id": "nile", "title": "Nile", "text": "The Nile is a river that flows through Egypt."}]
    return Retriever(BM25Index().build(demo), top_k=2)


def own_tools() -> dict[str, Any]:
    """This package's basic tools with default settings (the retriever over a three-passage demo corpus,
    BM25 so no model has to load; web search with its cache off)."""
    from tools.calculator import Calculator
    from tools.python_tool import PythonTool
    from tools.web_search import WebSearch

    tools = [PythonTool(), Calculator(), _demo_retriever(), WebSearch(cache_dir="")]
    return {t.name: t for t in tools}


def registry_tools() -> dict[str, Any]:
    """Every registered tool, built for the default experiment's zoo (the demo retriever stands in for a
    corpus, which the default zoo does not configure)."""
    try:
        from tools.registry import TOOL_BUILDERS, build_tools
    except ImportError:
        print("tools.registry is not there yet: checking this package's basic tools", file=sys.stderr)
        return own_tools()
    from orchestra.config import load_config

    zoo = load_config([]).zoo
    return build_tools(zoo, names=sorted(TOOL_BUILDERS), retriever=_demo_retriever())


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tools.check", description="check every registered tool")
    parser.add_argument("--own", action="store_true", help="check only tools/' basic tools")
    parser.add_argument("--strict", action="store_true", help="network tools must succeed too")
    args = parser.parse_args(argv)
    tools = own_tools() if args.own else registry_tools()
    report = check_registry(tools, offline_ok=not args.strict)
    for name, problems in sorted(report.items()):
        print(f"{'ok  ' if not problems else 'FAIL'} {name}")
        for p in problems:
            print(f"       - {p}")
    failed = sum(1 for p in report.values() if p)
    print(f"{len(report) - failed}/{len(report)} tools pass")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
