"""MCP servers as tools: each tool of a configured MCP server becomes one of our Tool objects.

`zoo.mcp_servers` (orchestra.config.MCPServerConfig) names servers reached over stdio (a subprocess) or
streamable HTTP (tools/mcp/client.py, on the official `mcp` SDK). A server's tool `add` joins the catalogue as
`<server>__add` when `zoo.tools` names it, with the server's own inputSchema as its parameters and its price
per call and typical latency from config; tools/registry.py builds it like any other tool, so the tool-server
actors' timeouts, retries, spend ledger and the per-episode budget (tools/base.guarded_call) apply unchanged.

`MCPTool.call` never raises: a tool error (`isError`), a protocol error, a crashed or unreachable server and a
call past the server's `timeout_s` come back as `ToolResult.failure`; a lost connection is marked `retryable`
(the next call reconnects). A tool whose inputSchema is not a valid JSON schema with an object root is
skipped (with a warning) when a catalogue is listed, and refused with a ConfigError naming server and tool
when zoo.tools names it. `python -m tools.mcp [overrides]` prints the names a config's servers offer.
"""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

from orchestra.config import ConfigError, MCPServerConfig
from orchestra.config.checks import check_mcp_servers
from orchestra.schema import function_schema
from orchestra.types import Task, ToolContext, ToolResult
from tools.mcp.client import MCPCallError, MCPConnection

log = logging.getLogger(__name__)
SEP = "__"  # catalogue name = <server><SEP><tool>


def schema_problem(schema: Any) -> str | None:
    """Why `schema` cannot be a tool's parameters (None when it can): a JSON schema with an object root."""
    if not isinstance(schema, dict):
        return f"inputSchema must be a JSON object, got {type(schema).__name__}"
    if schema.get("type") != "object":
        return f"inputSchema root must have type 'object', got {schema.get('type')!r}"
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        return f"inputSchema is not a valid JSON schema at {where}: {e.message}"
    remote = _remote_refs(schema)
    if remote:  # argument checks would have to fetch them (and would raise offline)
        return f"inputSchema refers to external schemas {remote[:3]}; only local '#...' references are supported"
    return None


def _remote_refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [v for k, v in node.items() if k in ("$ref", "$dynamicRef") and not str(v).startswith("#")]
        return own + [r for v in node.values() for r in _remote_refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _remote_refs(v)]
    return []


def result_text(result: Any, max_chars: int) -> str:
    """The text of a CallToolResult: text blocks, resource text, placeholders for binary content, else the
    structured content as JSON; cut to `max_chars`."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource" and hasattr(block.resource, "text"):
            parts.append(block.resource.text)
        else:
            parts.append(f"[{kind or 'content'} {getattr(block, 'mime_type', '') or ''}]".replace(" ]", "]"))
    text = "\n".join(parts)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, default=str)
    return text if len(text) <= max_chars else text[:max_chars] + f"... [cut at {max_chars} chars]"


class MCPTool:
    """One MCP server tool behind our Tool protocol; `call` never raises."""

    def __init__(self, name: str, remote_name: str, description: str, parameters: dict[str, Any],
                 connection: MCPConnection, *, price_usd: float = 0.0, latency_s: float = 1.0,
                 timeout_s: float = 30.0, max_output_chars: int = 4000):
        self.name, self.remote_name, self.connection = name, remote_name, connection
        self.parameters = parameters
        self.price_usd, self.latency_s, self.timeout_s = float(price_usd), float(latency_s), float(timeout_s)
        self.max_output_chars = int(max_output_chars)
        cost = f"${self.price_usd:g} per call" if self.price_usd else "free"
        self.description = (f"{description.strip() or remote_name} [MCP server {connection.server}; {cost}, "
                            f"typically ~{self.latency_s:g}s]")

    def schema(self, task: Task | None = None) -> dict[str, Any]:
        return function_schema(self.name, self.description, self.parameters)

    def cost_bound(self, args: dict[str, Any], ctx: ToolContext) -> float:
        return self.price_usd

    async def call(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        start = time.perf_counter()
        meta: dict[str, Any] = {"mcp_server": self.connection.server, "mcp_tool": self.remote_name}
        try:
            result, latency = await self.connection.call(self.remote_name, dict(args), self.timeout_s)
        except MCPCallError as e:
            # a request that reached the server may have run (and cost) before its answer was lost: charge it
            meta["timeout"] = e.timeout
            return ToolResult.failure(f"{self.name}: {e}", cost_usd=self.price_usd if e.sent else 0.0,
                                      latency_s=time.perf_counter() - start, meta=meta, retryable=e.lost)
        text = result_text(result, self.max_output_chars)
        if result.is_error:
            return ToolResult.failure(f"{self.name}: {text or 'the server reported an error'}",
                                      cost_usd=self.price_usd, latency_s=latency, meta=meta)
        if result.structured_content is not None:
            meta["structured"] = result.structured_content
        return ToolResult(text=text, cost_usd=self.price_usd, latency_s=latency, meta=meta)


def split_name(name: str) -> tuple[str, str] | None:
    """`<server>__<tool>` -> (server, tool); None for names that are not MCP catalogue names."""
    server, sep, tool = name.partition(SEP)
    return (server, tool) if sep and server and tool else None


def catalogue_name(server: str, tool: str) -> str:
    """Our name for a server's tool: function names allow letters, digits, _ and - only."""
    return f"{server}{SEP}{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"


class MCPCatalogue:
    """The tools of zoo.mcp_servers: each server is listed once, on first use."""

    def __init__(self, servers: list[MCPServerConfig]):
        check_mcp_servers(servers)
        self.servers = {s.name: s for s in servers}
        self.connections = {s.name: MCPConnection.from_config(s) for s in servers}
        self._listed: dict[str, dict[str, Any]] = {}

    def owns(self, name: str) -> bool:
        parts = split_name(name)
        return parts is not None and parts[0] in self.servers

    def listing(self, server: str) -> dict[str, Any]:
        """{catalogue name: the SDK's Tool} of one server."""
        if server not in self._listed:
            listed = self.connections[server].list_tools_sync()
            self._listed[server] = {catalogue_name(server, t.name): t for t in listed}
            unused = sorted(set(self.servers[server].tools) - {t.name for t in listed})
            if unused:  # most likely a typo in the config
                log.warning("mcp server %r: overrides for tools it does not list: %s", server, unused)
        return self._listed[server]

    def names(self) -> list[str]:
        """Every usable tool of every server; tools with a malformed inputSchema are skipped with a warning."""
        names = []
        for server in self.servers:
            for name, t in self.listing(server).items():
                problem = schema_problem(t.input_schema)
                if problem:
                    log.warning("mcp server %r: skipping tool %r: %s", server, t.name, problem)
                else:
                    names.append(name)
        return names

    def tool(self, name: str) -> MCPTool:
        """The tool named `<server>__<tool>`; ConfigError naming server and tool if it is missing or malformed."""
        parts = split_name(name)
        if parts is None or parts[0] not in self.servers:
            raise ConfigError(f"{name!r} is not a tool of any zoo.mcp_servers entry {sorted(self.servers)}")
        server, cfg = parts[0], self.servers[parts[0]]
        listing = self.listing(server)
        if name not in listing:
            raise ConfigError(f"zoo.tools: MCP server {server!r} has no tool {parts[1]!r}; it lists "
                              f"{sorted(t.name for t in listing.values())}")
        t = listing[name]
        problem = schema_problem(t.input_schema)
        if problem:
            raise ConfigError(f"MCP server {server!r}, tool {t.name!r}: {problem}")
        override = cfg.tools.get(t.name)
        price = override.price_usd if override and override.price_usd is not None else cfg.price_usd
        latency = override.latency_s if override and override.latency_s is not None else cfg.latency_s
        return MCPTool(name, t.name, t.description or "", dict(t.input_schema), self.connections[server],
                       price_usd=price, latency_s=latency, timeout_s=cfg.timeout_s,
                       max_output_chars=cfg.max_output_chars)
