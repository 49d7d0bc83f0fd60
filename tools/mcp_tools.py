"""Tools served by an MCP server (the `mcp` SDK), as a `ToolSet`.

    tools = MCPTools(command=["python", "server.py"])             # stdio: we start the server
    tools = MCPTools(url="http://127.0.0.1:8765/mcp")              # streamable HTTP, running
    tools = MCPTools(url=..., server_command=["python", "s.py"])   # HTTP, started and stopped here
    tools = MCPTools(server=mcp_server)                            # an MCPServer in this process
    env = MyToolEnv(tools=tools)

Why a ToolSet and not a new concept: the env, the rollout and the model see MCP tools exactly
like `@tool` functions. The server's `tools/list` gives the names, descriptions and input
schemas the model is shown; every call is checked against that schema with jsonschema before
it is sent, runs under the same per-call timeout, and a server-side failure (`isError`, an MCP
protocol error, a crashed server) comes back as an error observation the model reads, never as
an exception that ends the episode.

The MCP client lives on its own event loop in a daemon thread: the SDK's sessions are bound to
the anyio task that opened them, while agentrl calls tools from whichever loop the env steps
on (a fresh one per sync `step`). Calls are handed over with `run_coroutine_threadsafe`.
`close()` (which `ToolEnv.close` calls) ends the session and stops any process started here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO

from .core import ToolError, ToolSet, ToolSpec
from .processes import stop_group


class MCPTools(ToolSet):
    """The tools of one MCP server. Exactly one of `command` (stdio), `url` (HTTP) or `server`
    (an SDK `MCPServer`/`Server` object, connected in memory).

    `timeout_s` bounds each call; `startup_timeout_s` bounds starting the server and listing
    its tools. `include` keeps only the named tools; `prefix` is prepended to every name (two
    servers with a tool of the same name). Subclass to add local `@tool` methods alongside.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        url: str | None = None,
        server: Any = None,
        server_command: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float = 10.0,
        startup_timeout_s: float = 30.0,
        max_output_chars: int = 8192,
        include: Sequence[str] | None = None,
        prefix: str = "",
        stderr: TextIO | None = None,
    ) -> None:
        super().__init__()
        if sum(x is not None for x in (command, url, server)) != 1:
            raise ValueError(
                "MCPTools needs exactly one of command= (stdio), url= (HTTP) or server="
            )
        if server_command is not None and url is None:
            raise ValueError("MCPTools: server_command= starts an HTTP server; it needs url=")
        self.timeout_s, self.startup_timeout_s = timeout_s, startup_timeout_s
        self._stop: asyncio.Event | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="mcp")
        self._thread.start()
        try:
            if server_command is not None:
                self._process = subprocess.Popen(
                    list(server_command), env={**os.environ, **(env or {})}, cwd=cwd,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                )  # fmt: skip
            target = server if server is not None else url
            listed = self._submit(self._open(command, target, env, cwd, stderr), startup_timeout_s)
        except BaseException:
            self.close()
            raise
        wanted = set(include) if include is not None else None
        for t in listed:
            if wanted is not None and t.name not in wanted:
                continue
            name = prefix + t.name
            if name in self._specs:
                raise ValueError(f"MCP server and this ToolSet both define tool {name!r}")
            self._specs[name] = ToolSpec(
                name=name,
                fn=self._caller(t.name),
                schema={
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": t.description or t.title or t.name,
                        "parameters": dict(t.input_schema),
                    },
                },
                timeout_s=timeout_s,
                max_output_chars=max_output_chars,
            )
        if wanted is not None and (missing := wanted - {t.name for t in listed}):
            self.close()
            raise ValueError(f"MCP server has no tool(s) {sorted(missing)}; it has {self.names}")

    # -- the session, on the MCP loop ------------------------------------------------------
    async def _open(
        self,
        command: Sequence[str] | None,
        where: Any,
        env: dict[str, str] | None,
        cwd: str | None,
        stderr: TextIO | None,
    ) -> list[Any]:
        ready: asyncio.Future[list[Any]] = self._loop.create_future()
        self._stop = asyncio.Event()
        self._session_task = self._loop.create_task(
            self._hold_session(command, where, env, cwd, stderr, ready)
        )
        return await ready

    async def _hold_session(
        self,
        command: Sequence[str] | None,
        where: Any,
        env: dict[str, str] | None,
        cwd: str | None,
        stderr: TextIO | None,
        ready: asyncio.Future[list[Any]],
    ) -> None:
        """Open the client (`where`: a URL, or an in-process server), list the tools, then keep the session open until `close()`: the
        SDK requires entering and leaving it in one task."""
        from mcp import Client, StdioServerParameters, stdio_client

        assert self._stop is not None
        try:
            if command is not None:
                params = StdioServerParameters(
                    command=command[0], args=list(command[1:]), env=env, cwd=cwd
                )
                transport: Any = stdio_client(params, errlog=stderr or sys.stderr)
                client = Client(transport, read_timeout_seconds=self.timeout_s)
            elif isinstance(where, str):
                client = await self._reach(where)
            else:  # an in-process server object
                client = Client(where, read_timeout_seconds=self.timeout_s)
            async with client:
                self.client = client
                listed = await _list_all(client)
                ready.set_result(listed)
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported to whoever waits on `ready`
            if not ready.done():
                ready.set_exception(e)
            elif not isinstance(e, asyncio.CancelledError):
                raise

    async def _reach(self, url: str) -> Any:
        """A Client for `url`, retried until a server just started here answers."""
        from mcp import Client

        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            probe = Client(url, read_timeout_seconds=self.timeout_s)
            try:
                async with probe:
                    pass
                return Client(url, read_timeout_seconds=self.timeout_s)
            except Exception:
                if self._process is None or time.monotonic() > deadline:
                    raise
                if self._process.poll() is not None:
                    raise RuntimeError(
                        f"MCP server command exited with code {self._process.returncode} "
                        f"before serving {url}"
                    ) from None
                await asyncio.sleep(0.1)

    def _caller(self, remote: str) -> Any:
        async def call(**arguments: Any) -> str:
            fut = asyncio.run_coroutine_threadsafe(self._call(remote, arguments), self._loop)
            try:
                return await asyncio.wrap_future(fut)
            except asyncio.CancelledError:  # our timeout: stop the call on the server too
                fut.cancel()
                raise

        call.__name__ = remote
        return call

    async def _call(self, remote: str, arguments: dict[str, Any]) -> str:
        from mcp import MCPError

        try:
            result = await self.client.call_tool(remote, arguments)
        except MCPError as e:
            raise ToolError(f"MCP server error in {remote!r}: {e}") from None
        text = _render(result.content)
        if result.is_error:
            raise ToolError(text or f"tool {remote!r} failed on the MCP server")
        return text

    def _submit(self, coro: Any, timeout_s: float) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"MCP server did not list its tools within {timeout_s}s") from None

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """End the session (a stdio server exits with it) and stop a started HTTP server."""
        if self._loop.is_closed():
            return
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            done = asyncio.run_coroutine_threadsafe(_settle(self._session_task), self._loop)
            try:
                done.result(timeout=10)
            except (concurrent.futures.TimeoutError, Exception):  # noqa: BLE001 - closing anyway
                self._loop.call_soon_threadsafe(self._session_task.cancel)
        if self._process is not None and self._process.poll() is None:
            stop_group(self._process)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


async def _settle(task: asyncio.Task[Any]) -> None:
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout=8)
    except BaseException:  # noqa: BLE001 - a session that fails while closing is still closed
        task.cancel()


async def _list_all(client: Any) -> list[Any]:
    tools, cursor = [], None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def _render(content: list[Any]) -> str:
    """MCP content blocks as the text a tool message carries (non-text blocks are named)."""
    from mcp.types import EmbeddedResource, ResourceLink, TextContent, TextResourceContents

    parts = []
    for block in content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, EmbeddedResource) and isinstance(
            block.resource, TextResourceContents
        ):
            parts.append(block.resource.text)
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource: {block.uri}]")
        else:
            parts.append(f"[{block.type} content]")
    return "\n".join(parts)
