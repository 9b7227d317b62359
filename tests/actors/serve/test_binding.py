"""Binding a trained run's experts to live endpoints (actors/serve/binding.py, `make serve ... experts=FILE`),
against fake OpenAI-compatible servers on 127.0.0.1 started by the test.

The run is the shipped routing log (examples/routing_log.csv) turned into presets by `cluster.routing_log` (no
training: the binding needs only the run's saved config). The Serve app is the production builder
(`build_service`) with a scripted policy in place of the weights (a test double: it always calls the answer tier
given), so each request goes policy -> answer tool -> bound OpenAI expert -> fake server and back over HTTP."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import yaml

from actors.serve.binding import bind_experts, read_binding, run_config
from orchestra.config import ConfigError, load_config, task_tiers, to_yaml
from orchestra.rundir import checkpoint
from orchestra.types import Task, ToolCall, ToolContext
from tests.helpers.fakes import ByteTokenizer, ScriptedEngine, call_text
from tests.tools.experts.test_openai import FakeOpenAI
from tools.pricing import PriceTable

ROOT = Path(__file__).resolve().parents[3]
MINI_COST = PriceTable().cost("gpt-4o-mini", 120, 30)  # the fake servers report usage 120 in / 30 out


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    """`python -m cluster.routing_log examples/routing_log.csv --out DIR` (zoo, experiment, experts template)."""
    from cluster.routing_log import main

    out = tmp_path_factory.mktemp("routing") / "ex"
    assert main([str(ROOT / "examples" / "routing_log.csv"), "--out", str(out)]) == 0
    return out


@pytest.fixture
def servers(monkeypatch):
    monkeypatch.setenv("FAKE_EXPERT_KEY", "sk-fake-expert")
    big, mini = FakeOpenAI(), FakeOpenAI()
    big.script = [(200, "Working it through: \\boxed{391}", 0.0)]
    mini.script = [(200, "The answer is \\boxed{391}", 0.0)]
    yield SimpleNamespace(big=big, mini=mini)
    big.close()
    mini.close()


def write_binding(path: Path, servers, key_env: str = "FAKE_EXPERT_KEY", **mini_extra) -> Path:
    doc = {"gpt-4o": {"base_url": servers.big.url, "api_key_env": key_env, "model": "gpt-4o"},
           "gpt-4o-mini": {"base_url": servers.mini.url, "api_key_env": key_env, "model": "gpt-4o-mini",
                           **mini_extra}}
    path.write_text(yaml.safe_dump(doc))
    return path


def fake_run(root: Path, experiment: Path) -> Path:
    """A run dir as the local trainer leaves it: a checkpoint holding a model dir, and the config it trained with."""
    def write(d: Path) -> None:
        (d / "learner").mkdir()
        (d / "learner" / "config.json").write_text("{}")

    run = root / "run"
    checkpoint.save(run, 1, write, {"summary": {}})
    (run / "config.yaml").write_text(to_yaml(load_config([f"experiment={experiment}"])))
    return run


def mini_tier(log_dir: Path) -> str:
    tiers = task_tiers(load_config([f"experiment={log_dir / 'experiment.yaml'}"]))
    return next(t for t, e in tiers.items() if e == "gpt-4o-mini")


def served_app(monkeypatch, settings: dict, tier: str):
    """create_api over build_service(settings), the weights replaced by a policy that calls `answer(tier)`."""
    from actors.serve.api import settings_from_dict
    from actors.serve.http import create_api
    from actors.serve.wiring import build_service
    from orchestra import engine
    from orchestra.engine import hf
    from orchestra.policy import models

    tok = ByteTokenizer()
    monkeypatch.setattr(models, "load_policy", lambda *a, **k: (SimpleNamespace(device="cpu"), tok))
    monkeypatch.setattr(hf.HFEngine, "from_model",
                        classmethod(lambda cls, m, t, **k: ScriptedEngine(t, lambda _p: call_text("answer", model=tier))))
    monkeypatch.setattr(engine, "eos_token_ids", lambda t: [t.eos_token_id])
    # room for the whole tool call in byte tokens (the routing-log preset gives a BPE policy 48); the scripted policy
    # reads no route hint, and these runs have no router to attach one from (tests/actors/serve/test_router_mode.py
    # serves a run with hints)
    settings = {**settings, "overrides": ["sampling.max_tokens=200", "agent.route_hints=false",
                                          *settings.get("overrides", [])]}
    return create_api(build_service(settings_from_dict(settings)))


async def ask(app, body: dict) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
        return await c.post("/v1/chat/completions", json=body)


QUESTION = {"messages": [{"role": "user", "content": "What is 17 * 23?"}]}


# ---------------------------------------------------------------- the check, before anything starts
def test_routing_log_run_bound_to_its_two_models_passes_the_check(log_dir, servers, tmp_path, capsys):
    from cluster.serve import adopt_run_config, check_experts, main

    binding = write_binding(tmp_path / "experts.yaml", servers)
    run = fake_run(tmp_path, log_dir / "experiment.yaml")
    assert run_config(run) == run / "config.yaml"
    args = {"experiment": "cpu_tiny", "overrides": [], "checkpoint": str(run), "experts": str(binding)}
    adopt_run_config(args, False, {})  # served as the config the run was trained with
    check_experts(args)
    assert args["experiment"] == str(run / "config.yaml")  # the run's own experts are what gets bound
    cfg = bind_experts(load_config([f"experiment={args['experiment']}"]), binding)
    assert {n: (e.kind, e.base_url, e.model) for n, e in cfg.zoo.experts.items()} == {
        "gpt-4o": ("openai", servers.big.url, "gpt-4o"), "gpt-4o-mini": ("openai", servers.mini.url, "gpt-4o-mini")}
    assert main([f"checkpoint={run}", f"experts={binding}", "--check"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["args"]["experts"] == str(binding.resolve()) and shown["args"]["experiment"].endswith("config.yaml")
    assert not servers.big.requests and not servers.mini.requests  # checking calls nobody


def test_a_missing_tier_and_the_unfilled_template_are_refused_naming_them(log_dir, servers, tmp_path, capsys):
    from cluster.serve import main

    cfg = load_config([f"experiment={log_dir / 'experiment.yaml'}"])
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump({"gpt-4o": {"base_url": servers.big.url, "api_key_env": "", "model": "gpt-4o"}}))
    with pytest.raises(ConfigError) as e:
        bind_experts(cfg, partial)
    msg = str(e.value)
    assert "\n" not in msg and "gpt-4o-mini" in msg and f"tier {mini_tier(log_dir)}" in msg
    run = fake_run(tmp_path, log_dir / "experiment.yaml")
    assert main([f"checkpoint={run}", f"experts={partial}", "--check"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("serve config error:") and "gpt-4o-mini" in err[-1]
    with pytest.raises(ConfigError, match="REPLACE_ME.*fill in where gpt-4o"):  # the importer's template, unedited
        bind_experts(cfg, log_dir / "experts.yaml")
    assert set(read_binding(log_dir / "experts.yaml")) == {"gpt-4o", "gpt-4o-mini"}


@pytest.mark.parametrize("entry, match", [
    ({"base_url": "http://h/v1", "api_key": "sk-oops"}, r"gpt-4o\.api_key: unknown key"),
    ({"kind": "sim", "base_url": "http://h/v1"}, r"gpt-4o\.kind is 'sim'"),
    ({"base_url": "http://h/v1", "model": "my-own-llm"}, r"no price for model 'my-own-llm'.*price_in_per_mtok"),
    ({"base_url": "http://h/v1", "model": "my-own-llm", "price_in_per_mtok": 0.1}, "give both"),
    ({"api_key_env": "K", "model": "gpt-4o"}, "base_url is missing"),
    ({"base_url": "http://h/v1", "max_tokens": "many"}, r"max_tokens: expected a number"),
])
def test_bad_entries_are_named(log_dir, tmp_path, entry, match):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump({"gpt-4o": entry, "gpt-4o-mini": {"base_url": "http://h/v1"}}))
    with pytest.raises(ConfigError, match=match):
        bind_experts(load_config([f"experiment={log_dir / 'experiment.yaml'}"]), path)
    with pytest.raises(ConfigError, match="no such file"):
        read_binding(tmp_path / "missing.yaml")


def test_the_shipped_roster_binds_a_sim_trained_run_and_loads_as_a_zoo():
    from tools.experts.openai import OpenAIExpert
    from tools.registry import build_experts

    roster = ROOT / "conf" / "zoo" / "openai.yaml"
    cfg = bind_experts(load_config([]), roster)  # cpu_tiny: trained on the simulated zoo's names
    assert {cfg.zoo.experts[e].kind for e in task_tiers(cfg).values()} == {"openai"}
    for zoo in (cfg.zoo, load_config(["zoo=openai"]).zoo):
        experts = build_experts(zoo)  # every price resolves (genai-prices or the file's own)
        assert all(isinstance(e, OpenAIExpert) for e in experts.values())
        assert experts["gpt-5"].price() == PriceTable().price("gpt-5")
        assert experts["qwen3-32b"].price() == (0.1, 0.3) and experts["qwen3-32b"].request_model == "Qwen/Qwen3-32B"


def test_per_expert_overrides_on_the_serve_command_line():
    from cluster.serve import plan
    from tools.registry import build_experts

    p = plan(["zoo.experts.gpt-5.kind=openai", "zoo.experts.gpt-5.base_url=http://127.0.0.1:9/v1",
              "zoo.experts.gpt-5.api_key_env=OPENAI_API_KEY",
              "zoo.experts[qwen2.5-math-7b].kind=openai",  # a name with a dot: brackets
              "zoo.experts[qwen2.5-math-7b].model=Qwen/Qwen2.5-Math-7B-Instruct"])
    experts = build_experts(load_config(p.args["overrides"]).zoo)
    assert experts["gpt-5"].base_url == "http://127.0.0.1:9/v1" and experts["gpt-5"].api_key_env == "OPENAI_API_KEY"
    assert experts["qwen2.5-math-7b"].request_model == "Qwen/Qwen2.5-Math-7B-Instruct"


def test_run_config_finds_where_each_trainer_saved_it(tmp_path):
    run = fake_run(tmp_path, ROOT / "conf" / "experiment" / "cpu_tiny.yaml")
    inside = checkpoint.latest_good(run) / "learner"
    assert run_config(inside) == run / "config.yaml"  # a checkpoint inside the run
    hf = tmp_path / "verl" / "hf"
    hf.mkdir(parents=True)
    assert run_config(hf) is None and run_config(tmp_path / "nope") is None
    (hf / "orchestra_config.yaml").write_text("name: x\n")  # verl's export: the config beside the weights
    assert run_config(hf) == hf / "orchestra_config.yaml"


# ---------------------------------------------------------------- served through the bound experts
async def test_served_completion_and_stream_through_the_bound_expert(log_dir, servers, tmp_path, monkeypatch):
    binding = write_binding(tmp_path / "experts.yaml", servers)
    run = fake_run(tmp_path, log_dir / "experiment.yaml")
    app = served_app(monkeypatch, {"experiment": str(run / "config.yaml"), "checkpoint": str(run),
                                   "experts": str(binding)}, mini_tier(log_dir))
    r = await ask(app, QUESTION)
    body = r.json()
    assert r.status_code == 200 and body["choices"][0]["message"]["content"] == "391"
    trace = body["orchestra"]["trace"]
    assert [(t["expert"], t["error"], t["simulated"]) for t in trace] == [("gpt-4o-mini", None, False)]
    assert body["orchestra"]["cost_usd"] == pytest.approx(MINI_COST)  # usage x genai-prices' gpt-4o-mini price
    sent = servers.mini.requests[0]
    assert sent["model"] == "gpt-4o-mini" and sent["stream"] and "17 * 23" in sent["messages"][0]["content"]
    assert servers.mini.auth[0] == "Bearer sk-fake-expert" and not servers.big.requests

    r = await ask(app, {**QUESTION, "stream": True, "stream_options": {"include_usage": True}})
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
    observed = [e["orchestra"] for e in events if (e.get("orchestra") or {}).get("step") == "observation"]
    assert r.text.rstrip().endswith("data: [DONE]") and len(observed) == 1
    assert "391" in observed[0]["text"] and observed[0]["cost_usd"] == pytest.approx(MINI_COST)
    assert any(e["choices"] and e["choices"][0]["delta"].get("content") == "391" for e in events)


async def test_expert_failures_are_observations_and_retries_are_paid_once(log_dir, servers, tmp_path, monkeypatch):
    tier = mini_tier(log_dir)
    # 2 s: long enough that the first call's 404 is not read as a timeout on a loaded machine (xdist's second worker)
    binding = write_binding(tmp_path / "experts.yaml", servers, timeout_s=2.0)
    app = served_app(monkeypatch, {"experiment": str(log_dir / "experiment.yaml"), "experts": str(binding)}, tier)
    servers.mini.script = [(404, "The model `gpt-4o-mini` does not exist", 0.0)]
    r = await ask(app, QUESTION)
    trace = r.json()["orchestra"]["trace"]
    assert r.status_code == 200 and trace and "HTTP 404" in trace[0]["error"] and "does not exist" in trace[0]["error"]
    assert r.json()["orchestra"]["termination"] != "error"  # the policy saw it; the request did not fail

    servers.mini.requests.clear()
    servers.mini.script = [(200, "too late", 5.0)]
    r = await ask(app, QUESTION)
    assert r.status_code == 200 and "timed out after 2.0s" in r.json()["orchestra"]["trace"][0]["error"]

    servers.mini.requests.clear()
    servers.mini.script, servers.mini.retry_after = [(429, "slow down", 0.0), (200, "\\boxed{391}", 0.0)], "0"
    r = await ask(app, QUESTION)
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "391" and len(servers.mini.requests) == 2
    assert body["orchestra"]["cost_usd"] == pytest.approx(MINI_COST)  # the 429 billed nothing, the success once


async def test_the_server_budget_refuses_a_call_before_it_is_made(log_dir, servers, tmp_path, monkeypatch):
    binding = write_binding(tmp_path / "experts.yaml", servers)
    app = served_app(monkeypatch, {"experiment": str(log_dir / "experiment.yaml"), "experts": str(binding),
                                   "overrides": ["agent.budget.usd=0.000001"]}, mini_tier(log_dir))
    r = await ask(app, {**QUESTION, "budget": {"usd": 5.0}})  # a looser request budget does not win
    ext = r.json()["orchestra"]
    assert ext["termination"] == "budget" and ext["cost_usd"] == 0.0 and ext["trace"][0]["budget_refused"]
    assert not servers.mini.requests


async def test_50_concurrent_requests_through_bound_experts_have_no_errors(log_dir, servers, tmp_path, monkeypatch):
    binding = write_binding(tmp_path / "experts.yaml", servers)
    servers.mini.script = [(200, "The answer is \\boxed{391}", 0.05)]
    app = served_app(monkeypatch, {"experiment": str(log_dir / "experiment.yaml"), "experts": str(binding)},
                     mini_tier(log_dir))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as c:
        rs = await asyncio.wait_for(asyncio.gather(*[c.post("/v1/chat/completions", json=QUESTION)
                                                     for _ in range(50)]), timeout=120)
    assert [r.status_code for r in rs] == [200] * 50 and len(servers.mini.requests) == 50
    traces = [t for r in rs for t in r.json()["orchestra"]["trace"]]
    assert [t["error"] for t in traces if t["error"]] == [] and all(r.json()["choices"][0]["message"]["content"]
                                                                     == "391" for r in rs)


def capped_call(log_dir, servers, tmp_path):
    """(config bound to the fake servers, one `answer` call to the mini tier, its context, its $ bound)."""
    from tools.registry import build_tools

    cfg = bind_experts(load_config([f"experiment={log_dir / 'experiment.yaml'}"]),
                       write_binding(tmp_path / "experts.yaml", servers, key_env=""))
    task = Task(id="cap", problem="What is 17 * 23?", answer="", tools=["answer"], model_mapping=task_tiers(cfg))
    ctx, call = ToolContext(task=task), ToolCall(name="answer", arguments={"model": mini_tier(log_dir)})
    return cfg, call, ctx, build_tools(cfg.zoo, ["answer"])["answer"].cost_bound(call.arguments, ctx)


async def test_the_run_spend_cap_holds_for_bound_experts(ray_cluster, log_dir, servers, tmp_path):
    """zoo.spend_cap_usd (the spend ledger of tool-server actors): reserved at the call's bound, settled at the $
    the server's usage says; no key here (Ray workers keep the environment they started with)."""
    from actors.tool_client import RayToolClient
    from actors.tool_server import make_tool_servers
    from tools.registry import zoo_dict

    cfg, call, ctx, bound = capped_call(log_dir, servers, tmp_path)
    zoo = {**zoo_dict(cfg.zoo), "spend_cap_usd": bound + MINI_COST / 2}  # room for one call, not two
    handles, ledger = make_tool_servers(zoo, ["answer"], name_suffix=f"-binding-{os.getpid()}")
    try:
        client = RayToolClient(handles, timeout_s=60)
        first, second = await client.call(call, ctx), await client.call(call, ctx)
        assert first.ok and first.cost_usd == pytest.approx(MINI_COST)
        assert not second.ok and "budget exhausted" in second.error and second.meta.get("spend_cap")
        state = ray_cluster.get(ledger.state.remote())
        assert state["spent"] == pytest.approx(MINI_COST) and len(servers.mini.requests) == 1
    finally:
        for h in [*handles.values(), ledger]:
            ray_cluster.kill(h)


async def test_served_tool_servers_share_one_spend_ledger(ray_cluster, log_dir, servers, tmp_path):
    """Serve with tools=actors and zoo.spend_cap_usd: every replica's tool_server_handles find the same tool servers
    and the same ledger, so the cap holds for the deployment (room for one call here, not two)."""
    from dataclasses import replace

    from actors.serve.wiring import TOOL_NAMESPACE, tool_server_handles
    from actors.tool_client import RayToolClient

    cfg, call, ctx, bound = capped_call(log_dir, servers, tmp_path)
    zoo = replace(cfg.zoo, spend_cap_usd=bound + MINI_COST / 2)
    a, b = tool_server_handles(zoo, ["answer"]), tool_server_handles(zoo, ["answer"])  # two replicas
    try:
        assert a["answer"]._actor_id == b["answer"]._actor_id
        first = await RayToolClient(a, timeout_s=60).call(call, ctx)
        second = await RayToolClient(b, timeout_s=60).call(call, ctx)
        assert first.ok and not second.ok and second.meta.get("spend_cap") and len(servers.mini.requests) == 1
    finally:
        for h in a.values():
            ray_cluster.kill(h)
        for actor in ray_cluster.util.list_named_actors(all_namespaces=True):
            if actor["namespace"] == TOOL_NAMESPACE and actor["name"].startswith("serve-spend-ledger:"):
                ray_cluster.kill(ray_cluster.get_actor(actor["name"], namespace=TOOL_NAMESPACE))


def test_local_tools_refuse_a_spend_cap(log_dir, monkeypatch):
    with pytest.raises(ValueError, match="tools=actors"):
        served_app(monkeypatch, {"experiment": str(log_dir / "experiment.yaml"), "tools": "local",
                                 "overrides": ["zoo.spend_cap_usd=1.0"]}, mini_tier(log_dir))
