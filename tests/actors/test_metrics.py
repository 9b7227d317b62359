"""Dashboard metrics (actors/metrics.py): every declared series is charted by cluster/grafana/orchestra_dashboard.json,
and the series a tool-server actor, the training driver and the Serve app record reach Ray's Prometheus export
port on 127.0.0.1 with the values that were recorded."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path

import httpx
import pytest

from actors import metrics
from orchestra.preferences import PRESETS
from tests.helpers.fakes import ByteTokenizer, FakeTool, ScriptedEngine, call_text

DASHBOARD = Path(__file__).resolve().parents[2] / "cluster" / "grafana" / "orchestra_dashboard.json"


def test_dashboard_charts_every_declared_series_and_nothing_else():
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|sum|count)$", "", m) for e in exprs for m in re.findall(r"ray_orchestra_(\w+)", e)}
    assert used == set(metrics.SERIES)
    assert len(metrics.SERIES) >= 10


def test_tags_stay_in_closed_sets():
    assert metrics.preset_of(dict(PRESETS["cost-first"])) == "cost-first"
    assert metrics.preset_of({"accuracy": 0.3, "cost": 0.7}) == "custom"
    tiers = {"answer-1": "gpt-5"}
    assert metrics.tier_of({"model": "answer-1"}, False, tiers) == "answer-1"
    assert metrics.tier_of({"model": "made-up-7"}, False, tiers) == "other"  # the model's typo is not a new series
    assert metrics.tier_of({"model": {"x": 1}}, True, tiers) == "other"
    assert metrics.tier_of({}, False, tiers) == ""
    assert metrics.tool_status({"budget_refused": True}, False) == "refused"
    assert metrics.tool_status({"timeout": True}, False) == "timeout"


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Our samples on the export port: (name, our tags) -> value summed over the processes that recorded it."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("ray_orchestra_"):  # Ray's own labels are capitalised (WorkerId, ...)
                mine = frozenset((k, v) for k, v in s.labels.items() if k[0].islower() and not k.startswith("otel"))
                out[(s.name, mine)] = out.get((s.name, mine), 0.0) + s.value
    return out


def wait_for(port: int, exact: dict, at_least: dict, timeout_s: float = 60.0) -> dict:
    """Poll until every `exact` series has its value and every `at_least` one reached its value."""
    def good(seen: dict) -> bool:
        return (all(seen.get(k) == pytest.approx(v) for k, v in exact.items())
                and all(seen.get(k, 0.0) >= v - 1e-9 for k, v in at_least.items()))

    deadline, seen = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        seen = scrape(port)
        if good(seen):
            return seen
        time.sleep(0.5)
    raise AssertionError(f"not exported within {timeout_s}s: want {exact} and at least {at_least}; "
                         f"got { {k: seen.get(k) for k in [*exact, *at_least]} }")


def tags(**kw: str) -> frozenset:
    return frozenset(kw.items())


class ProbeTool:
    """A priced tool with tiers, hosted by a tool-server actor under a name no other test uses."""

    name, description = "probe", "returns its tier"
    parameters = {"type": "object", "properties": {"model": {"type": "string"}}}

    def schema(self, task=None):
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def cost_bound(self, args, ctx):
        return 0.01

    async def call(self, args, ctx):
        from orchestra.types import ToolResult

        if args.get("model") != "probe-1":
            return ToolResult.failure(f"unknown tier {args.get('model')!r}")
        return ToolResult("probe-1 says hi", cost_usd=0.01, latency_s=0.0)


def probe_tool():
    return ProbeTool()


async def test_actor_driver_and_serve_series_reach_the_export_port(ray_cluster):
    import sys

    from actors.serve.http import create_api
    from actors.serve.service import OrchestraService
    from actors.tool_client import RayToolClient
    from actors.tool_server import make_tool_server
    from orchestra.agent.loop import AgentLoop
    from orchestra.agent.prompt import Prompter
    from orchestra.types import Task, ToolCall, ToolContext
    from tools.base import LocalToolClient

    ray_cluster.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    port = int(ray_cluster.nodes()[0]["MetricsExportPort"])
    key = lambda name, **kw: (f"ray_orchestra_{name}", tags(**kw))  # noqa: E731
    before = scrape(port)
    # a tool-server actor: two good calls to a tier, one to a tier that does not exist
    tool = f"probe-{os.getpid()}-{time.time_ns()}"
    server = make_tool_server(tool, {}, factory=probe_tool)
    client = RayToolClient({"probe": server}, timeout_s=60)
    task = Task(id="m1", problem="p", answer="a", tools=["probe"])
    ok = [await client.call(ToolCall(name="probe", arguments={"model": "probe-1"}), ToolContext(task=task))
          for _ in range(2)]
    bad = await client.call(ToolCall(name="probe", arguments={"model": "probe-9"}), ToolContext(task=task))
    assert all(r.ok for r in ok) and not bad.ok
    # the driver's per-step series (this process)
    metrics.record_step(3, {"reward": 0.25, "accuracy": 0.5, "cost_usd": 0.002, "version_lag": 0,
                            "phase_s": {"rollout": 4.0, "update": 1.5}, "learner": {"time_s": 1.5}})
    metrics.record("heldout_score", 0.4, stage="metrics-test")
    # the Serve app in this process: one answered request, one refused for its key
    tok = ByteTokenizer()
    engine = ScriptedEngine(tok, lambda prompt: call_text("answer", model="answer-1"))
    loop = AgentLoop(engine, LocalToolClient({"answer": FakeTool("answer", cost_usd=0.02, reply="4", answers=True)}),
                     Prompter(tok), eos_token_ids=[tok.eos_token_id])
    app = create_api(OrchestraService(loop, ["answer"], {"answer-1": "gpt-5"}, max_tokens=200), api_keys=["k"])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        body = {"messages": [{"role": "user", "content": "2+2?"}]}
        assert (await c.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer k"})).status_code == 200
        assert (await c.post("/v1/chat/completions", json=body)).status_code == 401

    exact = {  # series only this test writes, or gauges it set last
        key("tool_calls_total", tool=tool, tier="probe-1", status="ok"): 2,
        key("tool_calls_total", tool=tool, tier="other", status="error"): 1,
        key("tool_latency_seconds_count", tool=tool, tier="probe-1"): 2,
        key("tool_cost_usd_total", tool=tool, tier="probe-1"): 0.02,
        key("tool_in_flight", tool=tool, state="running"): 0,
        key("step"): 3, key("step_reward"): 0.25, key("step_accuracy"): 0.5, key("weight_version_lag"): 0,
        key("phase_seconds", phase="rollout"): 4.0,
        key("heldout_score", stage="metrics-test"): 0.4,
    }
    grown = [key("learner_update_seconds_count"), key("serve_requests_total", code="200"),
             key("serve_requests_total", code="401"), key("serve_latency_seconds_count", code="200")]
    seen = wait_for(port, exact, {k: before.get(k, 0.0) + 1 for k in grown})  # other tests in this process add too
    assert len({name for name, _ in seen}) >= 10
    url, counts = metrics.exported()  # the end-of-run line of `make train` reads the port the same way
    assert url.endswith(f":{port}/metrics") and len(counts) >= 10 and set(counts) <= set(metrics.SERIES)
    assert counts["tool_latency_seconds"] >= 1  # a histogram counts once per tag set, not per bucket
