"""A small MCP server for tests/tools/mcp/test_mcp.py, built on the official SDK's MCPServer (v1's FastMCP).

Tools: `add` (integers), `lookup` (a fixed fact table), `env` (what the process was given), `slow` (sleeps, for timeouts), `crash` (the process
exits mid-call, for crash handling), `fail` (raises: an MCP error result), `broken` (its inputSchema is
replaced by a malformed one, for schema checks). Run it as
`python mcp_echo_server.py stdio` or `python mcp_echo_server.py http <port>` (streamable HTTP on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import os
import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

FACTS = {"capital of France": "Paris", "boiling point of water at sea level": "100 C"}

server = MCPServer("echo", log_level="ERROR")


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Look a fact up by its key.")
def lookup(key: str) -> str:
    if key not in FACTS:
        raise ToolError(f"no fact for {key!r}; known keys: {sorted(FACTS)}")  # its message reaches the client
    return FACTS[key]


@server.tool(description="Sleep, then say so.")
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}s"


@server.tool(description="Kill the server process in the middle of the call.")
def crash() -> str:
    sys.stderr.flush()
    os._exit(3)


@server.tool(description="Always fails.")
def fail() -> str:
    raise RuntimeError("this tool always fails")


@server.tool(description="The value of an environment variable of the server process, or '(unset)'.")
def env(name: str) -> str:
    return os.environ.get(name, "(unset)")


@server.tool(description="Has a malformed input schema.")
def broken(x: int) -> int:
    return x


# A server bug the client must survive: `type` must be a JSON-schema type name, not a number.
server._tool_manager.get_tool("broken").parameters = {
    "type": "object", "properties": {"x": {"type": 12}}, "required": ["x"]}


if __name__ == "__main__":
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
