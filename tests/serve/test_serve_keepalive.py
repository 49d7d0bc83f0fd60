"""The trainer's gateway keeps an idle connection open past uvicorn's 5 s default.

An agent that runs a tool for longer than the keep-alive between two calls reuses a pooled
connection the server is closing; clients without retries (plain httpx) then fail with a
ReadError (seen at 64 sessions under load). The gateway (and `agentrl serve`) keep idle
connections `KEEP_ALIVE_S`. Real parts: the gateway's uvicorn server on loopback, a raw
HTTP/1.1 socket (no client-side retry or reconnect can hide a closed connection). The engine
is the scripted test engine: the subject is the connection, not generation."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

pytest.importorskip("fastapi", reason="pip install 'agentrl[serve]'")
pytest.importorskip("uvicorn", reason="pip install 'agentrl[serve]'")

sys.path.insert(0, str(Path(__file__).parents[1] / "rollout"))  # the scripted test engine

from simple_engine import ScriptedEngine  # noqa: E402

from agentrl.config.schema import SamplingConfig  # noqa: E402
from agentrl.rollout.gateway_host import GatewayHost  # noqa: E402
from agentrl.serve.limits import KEEP_ALIVE_S  # noqa: E402

IDLE_S = 6.5  # past uvicorn's default keep-alive (5 s)


def _get(sock: socket.socket) -> bytes:
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n")
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_an_idle_connection_outlives_a_slow_tool(served_model: tuple[Any, Any]) -> None:
    assert KEEP_ALIVE_S > IDLE_S
    _, chat = served_model

    async def main() -> tuple[bytes, bytes]:
        host = GatewayHost(ScriptedEngine(chat, ["ok"]), chat, SamplingConfig())
        await host.start()
        try:
            parts = urlsplit(host.root)
            sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
            with sock:
                first = await asyncio.to_thread(_get, sock)
                await asyncio.sleep(IDLE_S)  # the agent runs a slow tool
                second = await asyncio.to_thread(_get, sock)
            return first, second
        finally:
            await host.stop()

    t0 = time.monotonic()
    first, second = asyncio.run(main())
    assert time.monotonic() - t0 >= IDLE_S
    assert first.startswith(b"HTTP/1.1 200"), first
    assert second.startswith(b"HTTP/1.1 200"), second  # b"" when the server closed it
