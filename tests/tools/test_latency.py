"""Local tools report modelled seconds by default (runs with one seed repeat), or measured ones labelled as such."""

from __future__ import annotations

import asyncio

from orchestra.config import load_config
from orchestra.types import Task, ToolContext
from tools.base import guarded_call
from tools.registry import build_tools

CTX = ToolContext(task=Task(id="t", problem="What is 6 * 7?", answer="42"))


def calc(*overrides: str):
    tool = build_tools(load_config(list(overrides)).zoo, ["calculator"])["calculator"]
    return asyncio.run(guarded_call(tool, {"expression": "6 * 7"}, CTX))


def test_modelled_by_default_with_what_was_measured_kept():
    r = calc()
    assert r.ok and "42" in r.text
    assert (r.latency_s, r.meta["latency"]) == (0.01, "modelled") and r.meta["measured_latency_s"] >= 0
    assert calc("zoo.tool_latency_s.calculator=0.25").latency_s == 0.25


def test_measured_on_request_and_labelled():
    r = calc("zoo.latency=measured")
    assert r.meta["latency"] == "measured" and "measured_latency_s" not in r.meta and r.latency_s >= 0


def test_the_sandbox_behind_enhance_reasoning_is_modelled_too():
    zoo = load_config(["zoo.sandbox.allow_unconfined=true"]).zoo
    tools = build_tools(zoo, ["enhance_reasoning"])
    sandbox = tools["enhance_reasoning"].backend
    assert sandbox.mode == "modelled" and sandbox.sandbox is not None  # the wrapped tool's attributes still reach
