"""Tool and expert registry: build a zoo's experts and tools by name from a ZooConfig.

`build_experts(zoo)` makes one Expert per `zoo.experts` entry (kind sim | openai | replay) and validates every
price at load: a model that genai-prices does not know and that has no override is an UnknownModelError
naming the expert. `build_tools(zoo, names)` makes the named tools: search, enhance_reasoning, answer, consult,
submit (tools/orchestra_tools.py), python, calculator, retrieve, web_search (tools/python_tool.py, calculator.py,
retriever.py, web_search.py), and `<server>__<tool>` for each tool of a `zoo.mcp_servers` entry
(tools/mcp/). Extend by registering a name: `register_tool(name, builder)` / `register_expert(kind, builder)`;
a builder receives a `Build` (the zoo plus lazily built shared parts).
`zoo` may be a ZooConfig or its plain dict (tool-server actors receive dicts, so no big objects are pickled).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from orchestra.config import ConfigError, ExpertConfig, ZooConfig
from tools.base import Tool
from tools.experts.base import Expert
from tools.experts.openai import OpenAIExpert
from tools.pricing import PriceTable, UnknownModelError


def as_zoo(zoo: ZooConfig | dict[str, Any]) -> ZooConfig:
    """A ZooConfig from a ZooConfig or a plain dict (validated against the schema, errors name the key)."""
    if isinstance(zoo, ZooConfig):
        return zoo
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ZooConfig), zoo))  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        raise ConfigError(f"zoo: bad key {getattr(e, 'full_key', '?')!r}: {str(e).splitlines()[0]}") from None


def zoo_dict(zoo: ZooConfig | dict[str, Any]) -> dict[str, Any]:
    return dataclasses.asdict(zoo) if isinstance(zoo, ZooConfig) else dict(zoo)


# ---------------------------------------------------------------- experts
ExpertBuilder = Callable[[str, ExpertConfig, PriceTable, ZooConfig], Expert]
EXPERT_BUILDERS: dict[str, ExpertBuilder] = {}


def register_expert(kind: str, builder: ExpertBuilder) -> None:
    EXPERT_BUILDERS[kind] = builder


def _sim(name: str, e: ExpertConfig, prices: PriceTable, zoo: ZooConfig) -> Expert:
    from tools.experts.sim import SimExpert

    return SimExpert(name, e.model or name, prices, skill=dict(e.skill), tokens_out=e.tokens_out,
                     latency_s=e.latency_s, max_tokens=e.max_tokens, seed=zoo.seed, sleep=zoo.sleep,
                     family=e.family, rho_task=zoo.error_correlation.get("task", 0.0),
                     rho_family=zoo.error_correlation.get("family", 0.0), shared_distractor=zoo.shared_distractor)


def _openai(name: str, e: ExpertConfig, prices: PriceTable, zoo: ZooConfig) -> Expert:
    return OpenAIExpert(name, e.model or name, prices, base_url=e.base_url, api_key_env=e.api_key_env,
                        max_tokens=e.max_tokens, timeout_s=e.timeout_s, latency_s=e.latency_s)


def _replay(name: str, e: ExpertConfig, prices: PriceTable, zoo: ZooConfig) -> Expert:
    from tools.experts.replay import ReplayExpert

    return ReplayExpert(name, e.model or name, prices, path=e.replay_path, latency_s=e.latency_s,
                        max_tokens=e.max_tokens)


register_expert("sim", _sim)
register_expert("openai", _openai)
register_expert("replay", _replay)


def build_experts(zoo: ZooConfig | dict[str, Any]) -> dict[str, Expert]:
    """One Expert per zoo entry; raises ConfigError (UnknownModelError for prices) naming the expert."""
    zoo = as_zoo(zoo)
    prices = PriceTable.from_experts(zoo.experts)
    experts: dict[str, Expert] = {}
    for name, cfg in zoo.experts.items():
        builder = EXPERT_BUILDERS.get(cfg.kind)
        if builder is None:
            raise ConfigError(f"zoo.experts.{name}: unknown kind {cfg.kind!r}; registered: {sorted(EXPERT_BUILDERS)}")
        try:
            experts[name] = builder(name, cfg, prices, zoo)
        except UnknownModelError as e:
            raise UnknownModelError(f"zoo.experts.{name}: {e}") from None
        except (TypeError, ValueError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"zoo.experts.{name}: {e}") from None
    for tier, expert in zoo.tiers.items():
        if expert not in experts:
            raise ConfigError(f"zoo.tiers.{tier}: names unknown expert {expert!r}")
    return experts


# ---------------------------------------------------------------- tools
class Build:
    """What tool builders share: the zoo and lazily built experts, search backend and sandbox."""

    def __init__(self, zoo: ZooConfig, corpus: Any = None, retriever: Tool | None = None, sandbox: Tool | None = None):
        self.zoo, self.corpus = zoo, corpus
        self._retriever, self._sandbox = retriever, sandbox

    @functools.cached_property
    def experts(self) -> dict[str, Expert]:
        return build_experts(self.zoo)

    @functools.cached_property
    def prompts(self) -> Any:
        from tools.orchestra_tools import ToolPrompts

        return ToolPrompts.from_dict(dict(getattr(self.zoo, "prompts", None) or {}))

    def reported(self, tool: Tool) -> Tool:
        """A local tool with the seconds its results report set by `zoo.latency` (tools/latency.py)."""
        from tools.latency import ReportedLatency

        return ReportedLatency(tool, self.zoo.latency, self.zoo.tool_latency_s.get(tool.name, 0.0))

    def sandbox(self) -> Tool:
        if self._sandbox is None:
            from tools.python_tool import PythonTool
            from tools.sandbox import Sandbox

            self._sandbox = self.reported(PythonTool(sandbox=Sandbox.from_config(self.zoo.sandbox)))
        return self._sandbox

    def retriever(self) -> Tool:
        if self._retriever is None:
            from tools.retrieval.retriever import build_retriever

            r = self.zoo.retriever
            self._retriever = self.reported(build_retriever(
                corpus=self.corpus if self.corpus is not None else r.corpus, index_dir=r.index_dir,
                model_dir=r.model_dir, index_type=r.index_type, top_k=r.top_k, kind=r.kind))
        return self._retriever

    def web_search(self) -> Tool:
        from tools.web_search import WebSearch

        return self.reported(WebSearch.from_config(self.zoo.web_search))

    @functools.cached_property
    def mcp(self) -> Any:
        """The zoo's MCP servers (each listed once, when one of its tools is first built)."""
        from tools.mcp.catalogue import MCPCatalogue

        return MCPCatalogue(list(self.zoo.mcp_servers))

    def search_backend(self) -> Tool:
        """The retriever when one is given or a corpus is configured; otherwise web search."""
        if self._retriever is not None or self.corpus is not None or self.zoo.retriever.corpus:
            return self.retriever()
        return self.web_search()


ToolBuilder = Callable[[Build], Tool]
TOOL_BUILDERS: dict[str, ToolBuilder] = {}


def register_tool(name: str, builder: ToolBuilder) -> None:
    TOOL_BUILDERS[name] = builder


def _orchestra_tool(name: str) -> ToolBuilder:
    def build(b: Build) -> Tool:
        from tools.orchestra_tools import ORCHESTRA_TOOLS

        cls = ORCHESTRA_TOOLS[name]
        backend = {"search": b.search_backend, "enhance_reasoning": b.sandbox}.get(name)
        return cls(b.experts, b.zoo.tiers, b.prompts, backend=backend() if backend else None)

    return build


def _calculator(b: Build) -> Tool:
    from tools.calculator import Calculator

    return b.reported(Calculator())


def _submit(b: Build) -> Tool:
    from tools.orchestra_tools import SubmitTool

    return SubmitTool(b.zoo.tiers)


for _name in ("search", "enhance_reasoning", "answer", "consult"):
    register_tool(_name, _orchestra_tool(_name))
register_tool("submit", _submit)
register_tool("python", lambda b: b.sandbox())
register_tool("calculator", _calculator)
register_tool("retrieve", lambda b: b.retriever())
register_tool("web_search", lambda b: b.web_search())


def build_tools(zoo: ZooConfig | dict[str, Any], names: list[str] | None = None, *, corpus: Any = None,
                retriever: Tool | None = None, sandbox: Tool | None = None) -> dict[str, Tool]:
    """Tools by name (default: zoo.tools). Unknown names raise ConfigError listing the registered ones."""
    zoo = as_zoo(zoo)
    names = list(zoo.tools if names is None else names)
    b = Build(zoo, corpus=corpus, retriever=retriever, sandbox=sandbox)
    mcp = [n for n in names if n not in TOOL_BUILDERS and zoo.mcp_servers and b.mcp.owns(n)]
    unknown = [n for n in names if n not in TOOL_BUILDERS and n not in mcp]
    if unknown:
        raise ConfigError(f"unknown tool(s) {unknown}; registered tools are {sorted(TOOL_BUILDERS)}"
                          + (" and <server>__<tool> of zoo.mcp_servers" if zoo.mcp_servers else ""))
    return {n: b.mcp.tool(n) if n in mcp else TOOL_BUILDERS[n](b) for n in names}


def tier_costs(zoo: Any, tiers: dict[str, str]) -> dict[str, float]:
    """$ of one nominal call per tier (1000 tokens in, the expert's typical output), for ranking tiers."""
    experts = build_experts(zoo)
    out = {}
    for tier, name in tiers.items():
        e = experts.get(name)
        if e is not None:
            out[tier] = float(e.cost(1000, int(getattr(e, "tokens_out", 500) or 500)))
    return out
