"""ToolOrchestra's search / enhance_reasoning / answer over the simulated zoo, with a real BM25 retriever and
the real sandbox: tier resolution per task, priced descriptions, cost bounds, extractors, and the registry."""

from __future__ import annotations

import pytest

from orchestra.config import ConfigError, load_config
from orchestra.schema import check_arguments
from orchestra.types import Task, ToolContext, ToolResult
from tools.base import LocalToolClient, guarded_call
from tools.orchestra_tools import ToolPrompts, extract_answer
from tools.registry import TOOL_BUILDERS, build_experts, build_tools, register_tool

CORPUS = [{"id": "d1", "title": "Zorblat", "text": "The capital of the land of Zorblat is Quenton."},
          {"id": "d2", "title": "Mirevale", "text": "Mirevale is famous for its glass towers and rivers."},
          {"id": "d3", "title": "Arith", "text": "Seven times six is a common multiplication example."}]


class FeeSearch:
    """A web-search stand-in with a per-call fee, to check that fees are charged and bounded."""

    name, description = "web_search", "fake paid search"
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}

    def schema(self, task=None):
        return {"type": "function", "function": {"name": self.name, "parameters": self.parameters}}

    def cost_bound(self, args, ctx):
        return 0.008

    async def call(self, args, ctx):
        return ToolResult(f"hit for {args['query']}", cost_usd=0.008, latency_s=0.5,
                          meta={"documents": [f"Result about {args['query']}: Quenton"]})


@pytest.fixture(scope="module")
def zoo():
    # Routing and pricing are under test, not isolation: opting in lets the experts' code run on a host
    # without bubblewrap too (where it is there, the sandbox is the full one all the same).
    return load_config(["zoo.sandbox.allow_unconfined=true"]).zoo


@pytest.fixture(scope="module")
def tools(zoo):
    from tools.retrieval.retriever import build_retriever

    retriever = build_retriever(corpus=CORPUS, kind="bm25", top_k=2)
    return build_tools(zoo, ["search", "enhance_reasoning", "answer", "calculator"], retriever=retriever)


def _task(i=0, **kw) -> Task:
    base = dict(id=f"q{i}", problem="What is the capital of the land of Zorblat?", answer="Quenton",
                meta={"family": "lookup", "difficulty": 1})
    return Task(**{**base, **kw})


def test_schemas_show_task_tiers_with_prices_and_latency(tools, zoo):
    schema = tools["search"].schema(_task())
    enum = schema["function"]["parameters"]["properties"]["model"]["enum"]
    assert enum == ["search-1", "search-2", "search-3"]
    desc = schema["function"]["description"]
    assert "search-1 $1.25/$10 ~9s" in desc  # gpt-5's genai-prices price ($/M tokens in/out) and latency
    assert tools["answer"].schema(_task())["function"]["parameters"]["properties"]["model"]["enum"] == [
        "answer-1", "answer-2", "answer-3", "answer-4", "answer-math-1", "answer-math-2"]
    # a task's own mapping and price overrides change what the orchestrator sees
    custom = _task(model_mapping={"answer-1": "qwen3-32b", "answer-2": "gpt-5"},
                   pricing={"gpt-5": {"input": 2.0, "output": 20.0}})
    desc = tools["answer"].schema(custom)["function"]["description"]
    assert "answer-1 $0.1/$0.3" in desc and "answer-2 $2/$20" in desc
    assert "answer-3" not in desc
    for tool in tools.values():
        assert check_arguments(tool.parameters, tool.example_args()) is None


async def test_search_runs_the_retriever_and_charges_expert_tokens(tools, zoo):
    task = _task()
    qwen = build_experts(zoo)["qwen3-32b"]
    results = [await guarded_call(tools["search"], {"model": "search-3"}, ToolContext(task=task, attempt=a))
               for a in range(6)]
    for r in results:
        assert r.ok and r.meta["model"] == "qwen3-32b" and r.meta["simulated"] is True
        assert r.cost_usd == pytest.approx(qwen.cost(r.tokens_in, r.tokens_out))
        assert r.latency_s > 0 and isinstance(r.meta["documents"], list)  # a vague query may find nothing
    # a good (full-problem) query finds the gold passage
    assert any("Quenton" in " ".join(r.meta["documents"]) for r in results)


async def test_search_fee_is_charged_and_bounded(zoo):
    tools = build_tools(zoo, ["search"], retriever=FeeSearch())
    ctx = ToolContext(task=_task())
    result = await tools["search"].call({"model": "search-2"}, ctx)
    expert_cost = result.cost_usd - 0.008
    assert result.ok and expert_cost > 0 and result.latency_s > 0.5
    assert tools["search"].cost_bound({"model": "search-2"}, ctx) >= result.cost_usd


async def test_enhance_reasoning_runs_code_in_the_sandbox(tools):
    outputs = []
    for i in range(3):
        task = Task(id=f"c{i}", problem="Compute 6*7.", answer="42", meta={"family": "code", "difficulty": 1,
                                                                          "code": "print(6 * 7)"})
        r = await tools["enhance_reasoning"].call({"model": "reasoner-3"}, ToolContext(task=task))
        assert r.ok and "code_output" in r.meta and r.meta["code"]
        outputs.append(r.meta["code_output"].strip())
    assert "42" in outputs  # the sandbox really ran the expert's program (coder skill 0.92: right most times)


async def test_answer_ends_with_extracted_answer_and_bounds_hold(tools):
    task = _task(meta={"family": "arith", "difficulty": 1})
    task.answer = "7"
    for tier in tools["answer"].tier_ids(task):
        ctx = ToolContext(task=task, documents=["irrelevant"], code_outputs=["7"])
        r = await tools["answer"].call({"model": tier}, ctx)
        assert r.ok and r.meta["answer"] and r.text == f"Answer: {r.meta['answer']}"
        assert 0 < r.cost_usd <= tools["answer"].cost_bound({"model": tier}, ctx)


async def test_bad_tiers_and_budgets_are_error_results(tools):
    ctx = ToolContext(task=_task())
    bad = await guarded_call(tools["answer"], {"model": "search-1"}, ctx)
    assert not bad.ok and "answer-1" in bad.error and bad.meta["invalid_arguments"]
    missing = await guarded_call(tools["answer"], {}, ctx)
    assert not missing.ok and "model" in missing.error
    poor = ToolContext(task=_task(), budget_usd_left=1e-6)
    refused = await guarded_call(tools["answer"], {"model": "answer-1"}, poor)
    assert not refused.ok and refused.meta["budget_refused"]
    dangling = _task(model_mapping={"answer-1": "not-in-zoo"})
    r = await tools["answer"].call({"model": "answer-1"}, ToolContext(task=dangling))
    assert not r.ok and "not-in-zoo" in r.error


def test_extractors():
    ex = ToolPrompts().answer_extractors
    assert extract_answer("so \\boxed{\\frac{a}{b}} done", ex) == "\\frac{a}{b}"
    assert extract_answer("first \\boxed{1} then \\boxed{2}", ex) == "2"
    assert extract_answer("I think <answer> Paris </answer>.", ex) == "Paris"
    assert extract_answer("work\n\nFinal: 12\n", ex) == "Final: 12"
    assert extract_answer("<answer>x</answer> \\boxed{y}", ["answer_tag", "boxed"]) == "x"
    with pytest.raises(ValueError, match="unknown answer extractor"):
        extract_answer("x", ["nope"])


async def test_registry_and_local_client(zoo, tools):
    with pytest.raises(ConfigError, match="unknown tool"):
        build_tools(zoo, ["search", "teleport"])

    class Echo:
        name, description = "echo", "echo"
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

        def schema(self, task=None):
            return {"type": "function", "function": {"name": "echo", "parameters": self.parameters}}

        def cost_bound(self, args, ctx):
            return 0.0

        async def call(self, args, ctx):
            return ToolResult(args["text"])

    register_tool("echo", lambda b: Echo())
    try:
        assert build_tools(zoo, ["echo"])["echo"].name == "echo"
    finally:
        TOOL_BUILDERS.pop("echo")
    client = LocalToolClient(tools)
    task = _task(tools=["search", "answer"])
    assert [s["function"]["name"] for s in client.schemas(task)] == ["search", "answer"]
    with pytest.raises(ValueError, match="unknown key"):
        ToolPrompts.from_dict({"qeury": "typo"})


def test_prompts_fill_placeholders_and_keep_problem_braces(tools):
    task = Task(id="b", problem="Put it in \\boxed{{}} for {x}", answer="1")
    text = tools["answer"].messages(ToolContext(task=task, documents=["passage one"], code_outputs=["out"]))[0]
    assert "\\boxed{}." in text["content"]  # the template's doubled braces
    assert "Put it in \\boxed{{}} for {x}" in text["content"]  # the problem, untouched
    assert "passage one" in text["content"] and "out" in text["content"]
    custom = ToolPrompts.from_dict({"answer": "Q: {problem} -> <answer></answer>", "answer_extractors": ["answer_tag"]})
    assert custom.answer.startswith("Q: {problem}") and custom.answer_extractors == ["answer_tag"]
