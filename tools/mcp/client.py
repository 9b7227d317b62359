"""The MCP client side of tools/mcp/: a connection to one MCP server over stdio or streamable HTTP.

Built on the official `mcp` SDK (imported lazily: `import tools.mcp.client` costs nothing). A connection keeps
one live SDK session per event loop, because a session belongs to the loop (and the task) that opened it: a
runner task owns it, calls from any task of that loop share it, and a lost one is reopened by the next call.
Every failure of a call (no connection, timeout, lost connection mid-call, protocol error) is one
MCPCallError saying whether the request was sent and whether the connection is gone; turning that into a
tool result, pricing and naming belong to tools/mcp/. Secrets: env vars and headers are read from the
environment by name, and the server's URL is replaced by its name in every message made here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from typing import Any

from orchestra.config import ConfigError, MCPServerConfig

log = logging.getLogger(__name__)


class MCPCallError(Exception):
    """A call that got no answer. `sent`: the request reached the server (it may have run, and cost);
    `lost`: the connection is gone (the next call reconnects); `timeout`: no answer within the call's limit."""

    def __init__(self, message: str, *, sent: bool = True, lost: bool = False, timeout: bool = False):
        super().__init__(message)
        self.sent, self.lost, self.timeout = sent, lost, timeout


class _Session:
    """One SDK client session, owned by a runner task: the SDK's anyio scopes must be entered and left by the
    same task, while calls come from many tasks of the loop."""

    def __init__(self, connection: MCPConnection):
        self.client: Any = None
        self.error: BaseException | None = None
        self.ready, self.stop = asyncio.Event(), asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(connection))

    async def _run(self, connection: MCPConnection) -> None:
        try:
            async with connection.sdk_client() as client:
                self.client = client
                self.ready.set()
                await self.stop.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a dead or unreachable server (often an exception group): callers report it
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            self.error = e
        finally:
            self.client = None
            self.ready.set()

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.task.done() and not self.stop.is_set()

    def close(self) -> None:
        self.stop.set()


class MCPConnection:
    """One MCP server (flat arguments; see MCPServerConfig). `call` and `list_tools` open a session lazily."""

    def __init__(self, server: str, transport: str, *, command: str = "", args: list[str] | None = None,
                 cwd: str = "", env_vars: list[str] | None = None, url: str = "",
                 headers_env: dict[str, str] | None = None, connect_timeout_s: float = 20.0):
        self.server, self.transport = server, transport
        self.command, self.args, self.cwd = command, list(args or []), cwd
        self.env_vars, self.url, self.headers_env = list(env_vars or []), url, dict(headers_env or {})
        self.connect_timeout_s = float(connect_timeout_s)
        # event loop -> (its lock, its session, if any); entries of closed loops are purged on the next connect
        self._sessions: dict[Any, tuple[asyncio.Lock, list[_Session]]] = {}

    @classmethod
    def from_config(cls, s: MCPServerConfig) -> MCPConnection:
        return cls(s.name, s.transport, command=s.command, args=list(s.args), cwd=s.cwd, env_vars=list(s.env_vars),
                   url=s.url, headers_env=dict(s.headers_env), connect_timeout_s=s.connect_timeout_s)

    def redact(self, text: str) -> str:
        """`text` with the server's URL (which may carry a token) replaced by its name."""
        return text.replace(self.url, f"<{self.server} url>") if self.url else text

    def _from_env(self, names: list[str], what: str) -> dict[str, str]:
        missing = [n for n in names if n not in os.environ]
        if missing:  # names only: values are secrets
            log.warning("mcp server %r: %s %s not set", self.server, what, ", ".join(missing))
        return {n: os.environ[n] for n in names if n in os.environ}

    def sdk_client(self) -> Any:
        """An un-entered `mcp.Client` for this server (the SDK is imported only here)."""
        from mcp import Client, StdioServerParameters

        if self.transport == "stdio":
            params = StdioServerParameters(command=self.command, args=self.args, cwd=self.cwd or None,
                                           env=self._from_env(self.env_vars, "env_vars"))
            return Client(params)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        values = self._from_env(list(self.headers_env.values()), "headers_env variables")
        headers = {h: values[v] for h, v in self.headers_env.items() if v in values}
        return Client(streamable_http_client(self.url, http_client=create_mcp_http_client(headers=headers)))

    async def _session(self) -> _Session:
        """This loop's live session, opened (or reopened after a loss) on demand."""
        loop = asyncio.get_running_loop()
        if loop not in self._sessions:
            for closed in [lp for lp in self._sessions if lp.is_closed()]:
                del self._sessions[closed]
            self._sessions[loop] = (asyncio.Lock(), [])
        lock, held = self._sessions[loop]
        async with lock:  # concurrent first calls share one connection attempt
            if held and (held[0].alive or not held[0].ready.is_set()):
                session = held[0]  # live, or still connecting for a caller that gave up (cancelled) waiting
            else:
                if held:
                    held.pop().close()
                session = _Session(self)
                held.append(session)
            try:
                await asyncio.wait_for(session.ready.wait(), self.connect_timeout_s)
            except asyncio.TimeoutError:
                self._drop(session)
                raise MCPCallError(f"server {self.server!r} did not connect within {self.connect_timeout_s:g}s",
                                   sent=False, lost=True) from None
            if session.client is None:
                self._drop(session)
                raise MCPCallError(f"cannot connect to server {self.server!r}: "
                                   f"{self.redact(_describe(session.error))}", sent=False, lost=True)
            return session

    def _drop(self, session: _Session | None = None) -> asyncio.Task | None:
        """Close this loop's session (only if it is still `session`, when given: a concurrent call may have
        reopened it already); returns the closed session's runner task, to await its end."""
        entry = self._sessions.get(asyncio.get_running_loop())
        if entry and entry[1] and (session is None or entry[1][0] is session):
            closed = entry[1].pop()
            closed.close()
            return closed.task
        return None

    async def call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> tuple[Any, float]:
        """(the SDK's CallToolResult, seconds of service time, connecting not included) or MCPCallError; never a
        timeout or a cancellation leaking from the SDK. `timeout_s` bounds the call once connected."""
        session = await self._session()
        start = time.perf_counter()
        # In its own task, waited with asyncio.wait: a transport failure can cancel the SDK's request task,
        # and that cancellation must become an error result here, not cancel the episode calling us.
        client = session.client
        if client is None:  # the session ended between the lock and here
            raise MCPCallError(f"connection to server {self.server!r} lost", sent=False, lost=True)
        inner = asyncio.ensure_future(client.call_tool(tool, arguments))
        try:
            done, _ = await asyncio.wait({inner}, timeout=timeout_s)
        except asyncio.CancelledError:
            inner.cancel()
            raise
        if not done:
            inner.cancel()
            raise MCPCallError(f"timed out after {timeout_s:g}s", timeout=True)
        if inner.cancelled():
            self._drop(session)
            raise MCPCallError(f"connection to server {self.server!r} lost mid-call", lost=True)
        error = inner.exception()
        if error is None:
            return inner.result(), time.perf_counter() - start
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        # a protocol error (unknown tool, bad params) leaves the session usable; anything else does not
        lost = not isinstance(error, MCPError) or error.code == CONNECTION_CLOSED
        if lost:
            self._drop(session)
        raise MCPCallError(self.redact(_describe(error)), lost=lost)

    async def list_tools(self) -> list[Any]:
        """Every tool the server lists (all pages)."""
        client = (await self._session()).client
        tools, cursor = [], None
        for _ in range(100):  # a server whose pages never end cannot hang the build
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    def list_tools_sync(self) -> list[Any]:
        """`list_tools` from synchronous code (registry builds run outside or inside an event loop): a helper
        thread runs a short session of its own; raises ConfigError naming the server on failure."""
        async def once() -> list[Any]:
            try:
                return await asyncio.wait_for(self.list_tools(), self.connect_timeout_s)
            finally:
                runner = self._drop()
                if runner is not None:  # let the session end cleanly (the stdio server exits) before the loop does
                    await asyncio.wait({runner}, timeout=5.0)

        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"mcp-{self.server}") as pool:
            try:
                return pool.submit(asyncio.run, once()).result()
            except Exception as e:  # unreachable, timed out, not an MCP server: a config problem to fix
                reason = "timed out" if isinstance(e, asyncio.TimeoutError) else self.redact(_describe(e))
                raise ConfigError(f"zoo.mcp_servers[{self.server}]: cannot list tools: {reason}") from None


def _describe(error: BaseException | None) -> str:
    """One line for an exception, unwrapping the SDK's exception groups to their first leaf."""
    while getattr(error, "exceptions", None):  # an (anyio) exception group
        error = error.exceptions[0]
    if error is None:
        return "unknown error"
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
