"""MCPTools against real MCP servers written here with the SDK, over stdio and streamable HTTP.

The servers are separate processes started (and stopped) by the ToolSet, as in training."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="MCP tools need the `mcp` extra: pip install 'agentrl[mcp]'")

from agentrl.tools.mcp_tools import MCPTools  # noqa: E402
from agentrl.types import Message, ToolCall  # noqa: E402

SERVER = textwrap.dedent('''
    import asyncio, enum, os, sys
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("demo", log_level="CRITICAL")  # no rich tracebacks for `fail`

    class Unit(str, enum.Enum):
        C = "celsius"
        F = "fahrenheit"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def convert(value: float, to: Unit) -> str:
        """Convert a temperature given in the other unit."""
        return f"{value * 9 / 5 + 32:g}F" if to is Unit.F else f"{(value - 32) * 5 / 9:g}C"

    @server.tool()
    def fail(msg: str) -> str:
        """Always fails (ToolError: the SDK sends its message; it hides other exceptions')."""
        raise ToolError(msg)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep a while."""
        await asyncio.sleep(seconds)
        return "woke"

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    if __name__ == "__main__":
        if sys.argv[1:2] == ["http"]:
            server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
        else:
            server.run()
''')


@pytest.fixture
def server_file(tmp_path: Path) -> Path:
    path = tmp_path / "demo_server.py"
    path.write_text(SERVER)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return out.returncode == 0 and not out.stdout.strip().startswith("Z")


def _exercise(tools: MCPTools) -> int:
    """Schemas, a good call, and every failure path; returns the server's pid."""
    assert tools.names == ["add", "convert", "fail", "sleep", "pid"]
    add = tools.spec("add").schema["function"]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["required"] == ["a", "b"]
    assert add["parameters"]["properties"]["a"]["type"] == "integer"
    to = tools.spec("convert").parameters
    assert "celsius" in str(to)  # the Enum's values reach the model through the schema

    ok = tools.call(ToolCall("add", {"a": 2, "b": 40}, id="1"))
    assert (ok.content, ok.is_error) == ("42", False)
    assert tools.call(ToolCall("convert", {"value": 100, "to": "fahrenheit"})).content == "212F"
    bad = tools.call(ToolCall("add", {"a": "two", "b": 1}, id="2"))  # caught before sending
    assert bad.is_error and "invalid arguments" in bad.content and "'two'" in bad.content
    assert tools.call(ToolCall("convert", {"value": 1, "to": "kelvin"})).is_error
    failed = tools.call(ToolCall("fail", {"msg": "kaboom"}, id="3"))
    assert failed.is_error and "kaboom" in failed.content
    hung = tools.call(ToolCall("sleep", {"seconds": 30}, id="4"))
    assert hung.is_error and "timed out" in hung.content
    after = tools.call(ToolCall("add", {"a": 1, "b": 1}))  # the session survives a timeout
    assert after.content == "2"
    unknown = tools.call(ToolCall("nope", {}))
    assert unknown.is_error and "unknown tool" in unknown.content
    return int(tools.call(ToolCall("pid", {})).content)


def test_stdio_server_started_and_stopped_with_the_toolset(server_file: Path) -> None:
    tools = MCPTools([sys.executable, str(server_file)], timeout_s=3.0, stderr=sys.stderr)
    try:
        pid = _exercise(tools)
        assert _alive(pid)
    finally:
        tools.close()
    assert not _alive(pid)
    tools.close()  # idempotent


def test_streamable_http_server_started_and_stopped(server_file: Path) -> None:
    port = _free_port()
    tools = MCPTools(
        url=f"http://127.0.0.1:{port}/mcp",
        server_command=[sys.executable, str(server_file), "http", str(port)],
        timeout_s=3.0,
    )
    try:
        pid = _exercise(tools)
    finally:
        tools.close()
    assert not _alive(pid)


def test_env_uses_mcp_tools_like_local_ones(server_file: Path) -> None:
    """A ToolEnv over MCPTools: the prompt lists the server's tools, a call's result is the
    next observation, and closing the env stops the server."""
    from agentrl.envs import Task, ToolEnv

    class AddEnv(ToolEnv):
        def new_task(self, rng, options):  # noqa: ANN001, ANN201
            return Task([Message("user", "What is 2 + 40? Use add.")], answer="42")

        def score(self, final: Message) -> float:
            return float(final.content.strip() == self.task.answer)

    env = AddEnv(MCPTools([sys.executable, str(server_file)], include=["add"], prefix="calc_"))
    obs, _ = env.reset(seed=0)
    assert [t["function"]["name"] for t in obs.tools] == ["calc_add"]
    call = ToolCall("calc_add", {"a": 2, "b": 40}, id="c1")
    obs, reward, terminated, _, _ = env.step(Message("assistant", "", tool_calls=[call]))
    assert obs.messages[0].content == "42" and not terminated
    _, reward, terminated, _, _ = env.step(Message("assistant", "42"))
    assert reward == 1.0 and terminated
    env.close()


def test_bad_server_commands_fail_with_one_clear_error(server_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        MCPTools()
    with pytest.raises(ValueError, match="no tool"):
        MCPTools([sys.executable, str(server_file)], include=["add", "missing"])
    dead = tmp_path / "dead.py"
    dead.write_text("import sys; sys.exit(3)\n")
    port = _free_port()
    with pytest.raises(RuntimeError, match="exited with code 3"):
        MCPTools(url=f"http://127.0.0.1:{port}/mcp", server_command=[sys.executable, str(dead)])


def test_in_process_server_object() -> None:
    """An SDK `MCPServer` built in this process, connected in memory."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("inproc")

    @server.tool()
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    tools = MCPTools(server=server, timeout_s=2.0)
    try:
        assert tools.names == ["shout"]
        assert tools.call(ToolCall("shout", {"text": "hi"})).content == "HI"
        assert tools.call(ToolCall("shout", {"text": 3})).is_error
    finally:
        tools.close()
