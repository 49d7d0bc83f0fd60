"""`sandboxes.command`: a command line in bubblewrap that reaches one host port, no model.

The sandboxed side is full Python; each test checks the host side too (what the relay
served, what the result file held)."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest

from agentrl.sandboxes.command import RESULT_MAX, command_box, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"{unavailable()}")


async def _serve(reply: bytes) -> tuple[asyncio.AbstractServer, int, list[int]]:
    hits: list[int] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        hits.append(1)
        await r.read(100)
        w.write(reply)
        await w.drain()
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], hits


def _run(code: str, port: int, readonly: tuple[str, ...] = ()) -> tuple[int, Any, bytes | None]:
    async def go() -> tuple[int, Any, bytes | None]:
        async with command_box(port) as box:
            argv = box.argv([sys.executable, "-c", code], {}, readonly, 16)
            p = await asyncio.create_subprocess_exec(
                *argv, pass_fds=box.fds, stdout=-1, start_new_session=True
            )
            out, _ = await asyncio.wait_for(p.communicate(), 60)
            try:
                result = box.result_bytes()
            except ValueError as e:
                result = str(e).encode()
            return p.returncode or 0, out.decode(), result

    return asyncio.run(go())


def test_only_the_given_port_is_reachable() -> None:
    async def go() -> tuple[Any, list[int], list[int]]:
        ok, ok_port, ok_hits = await _serve(b"from the gateway")
        other, other_port, other_hits = await _serve(b"from another service")
        code = f"""
import json, socket
def get(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"hi"); return s.recv(100).decode()
    except OSError as e:
        return type(e).__name__
print(json.dumps([get({ok_port}), get({other_port})]))
"""
        async with ok, other:
            loop = asyncio.get_running_loop()
            status, out, _ = await loop.run_in_executor(None, _run, code, ok_port)
        return json.loads(out), ok_hits, other_hits

    (gateway, other), ok_hits, other_hits = asyncio.run(go())
    assert gateway == "from the gateway" and ok_hits == [1]
    assert other == "ConnectionRefusedError" and other_hits == []


@pytest.mark.parametrize(
    ("code", "expect"),
    [
        ("open('/work/result.json', 'w').write('{\"answer\": 7}')", b'{"answer": 7}'),
        ("import os; os.symlink('/run/agentrl/spec.json', '/work/result.json')", None),
        ("os = __import__('os'); os.mkfifo('/work/result.json')", None),
        (f"open('/work/result.json', 'w').write('x' * {RESULT_MAX + 10})", b"over"),
    ],
    ids=["plain", "symlink", "fifo", "too-big"],
)
def test_the_result_file_comes_back_capped_and_never_through_a_link(
    code: str, expect: bytes | None
) -> None:
    status, _, result = _run(code, 9)
    assert status == 0
    if expect == b"over":
        assert result is not None and b"over" in result and len(result) < 200
    else:
        assert result == expect


def test_exit_status_and_identity() -> None:
    code = (
        "import os, sys; caps = [x.split()[1] for x in open('/proc/self/status')"
        " if x.startswith(('CapEff', 'CapPrm'))]; print(os.getuid(), os.getcwd(), *caps);"
        " sys.exit(3)"
    )
    status, out, _ = _run(code, 9)
    uid, cwd, *caps = out.split()
    assert status == 3 and int(uid) != 0 and cwd == "/work"
    assert caps == ["0000000000000000", "0000000000000000"]  # no capability left
