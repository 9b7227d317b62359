"""The served tool catalogue: web search only with its key, the retriever only with a corpus, everything else as
configured; what is left out is logged with why; the production server narrows its service, an injected builder
keeps its own catalogue."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from actors.serve.catalogue import left_out, restrict_to_working_tools, working_tools
from orchestra.config import load_config

NAMES = ["search", "enhance_reasoning", "answer", "calculator", "web_search", "retrieve"]


def zoo(*overrides: str):
    return load_config(list(overrides)).zoo


def test_no_key_and_no_corpus_leaves_out_what_needs_them(caplog):
    with caplog.at_level(logging.WARNING, logger="orchestra.serve"):
        kept = working_tools(zoo(), NAMES, env={})
    assert kept == ["enhance_reasoning", "answer", "calculator"]
    logged = caplog.text
    assert "left out 'search'" in logged and "TAVILY_API_KEY is not set" in logged
    assert "zoo.retriever.corpus=PATH" in logged and "left out 'retrieve'" in logged


def test_a_key_brings_back_web_search_and_search():
    why = left_out(zoo(), NAMES, env={"TAVILY_API_KEY": "tvly-test"})
    assert list(why) == ["retrieve"]
    custom = zoo("zoo.web_search.api_key_env=MY_SEARCH_KEY")
    assert "search" in left_out(custom, NAMES, env={"TAVILY_API_KEY": "x"})  # the configured variable counts
    assert "search" not in left_out(custom, NAMES, env={"MY_SEARCH_KEY": "x"})
    assert "search" in left_out(zoo(), NAMES, env={"TAVILY_API_KEY": "  "})  # blank is no key


def test_a_served_corpus_brings_back_search_on_the_retriever_not_web_search(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "title": "t", "text": "391 = 17 * 23"}\n')
    why = left_out(zoo(f"zoo.retriever.corpus={corpus}"), NAMES, env={})
    assert list(why) == ["web_search"]


def test_restrict_narrows_the_service_catalogue(monkeypatch):
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    service = SimpleNamespace(catalogue=["answer", "enhance_reasoning", "search"])
    restrict_to_working_tools(service, SimpleNamespace(experiment="cpu_tiny", overrides=[]))
    assert service.catalogue == ["answer", "enhance_reasoning"]
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-test")
    service = SimpleNamespace(catalogue=["answer", "search"])
    restrict_to_working_tools(service, SimpleNamespace(experiment="cpu_tiny", overrides=[]))
    assert service.catalogue == ["answer", "search"]


def test_the_production_server_restricts_and_an_injected_builder_does_not(monkeypatch):
    import actors.serve.app as app

    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    monkeypatch.setattr(app, "build_service", lambda s: SimpleNamespace(catalogue=["search", "answer"]))
    settings = {"api_keys": ["sk-test"]}
    assert app.OrchestraServer(settings).service.catalogue == ["answer"]
    own = app.OrchestraServer(settings, builder=lambda s: SimpleNamespace(catalogue=["search", "answer"]))
    assert own.service.catalogue == ["search", "answer"]


@pytest.mark.parametrize("env", [{}, {"TAVILY_API_KEY": "k"}])
def test_a_task_offers_only_the_catalogue(env):
    """The narrowed catalogue is what the policy sees: a task's tools select the schemas rendered into its prompt."""
    from actors.serve.api import parse_request
    from actors.serve.service import OrchestraService
    from tools.base import LocalToolClient
    from tools.registry import build_tools

    cfg = load_config(["zoo.tools=[answer,search]"])
    tools = LocalToolClient(build_tools(cfg.zoo, list(cfg.zoo.tools)))
    loop = SimpleNamespace(tools=tools, budget_usd=None, budget_seconds=None, budget_turns=None)
    svc = OrchestraService(loop, working_tools(cfg.zoo, list(cfg.zoo.tools), env=env), dict(cfg.zoo.tiers))
    plan = svc.plan(parse_request(b'{"messages": [{"role": "user", "content": "What is 17 * 23?"}]}'))
    names = [s["function"]["name"] for s in tools.schemas(plan.task)]
    assert names == (["answer", "search"] if env else ["answer"])
