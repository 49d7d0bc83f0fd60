"""No sandboxed process reaches an fd of the host, however many the host holds.

Why: ``pass_fds`` keeps the host's fd numbers. In CI the test process held ~280 fds, so the
zygote's control socket was fd 281, above the range the judge closed, and the candidate wrote
forged replies on it (``test_judge_channels``). Here the host holds 300+ fds (pipes and socket
pairs it still reads, each with bytes waiting, some inheritable) while each other sandboxed
path starts: a plain run (local, on a zygote started under those fds; docker), a
code-interpreter session and a sandboxed command (``command.py``, as a harness agent runs,
with its seccomp fd passed at a high number). The adversary has full Python: it tries every fd
number it has (3..65535 and whatever ``/proc/self/fd`` lists) and every fd of every process it
can see in ``/proc``, reads and writes each; the host then checks that no byte arrived on any
of its own. What each path documents as the program's own (stdio, the verdict pipe, a session
worker's two pipes) is allowed, nothing else. (The session's trusted parent is the worker's
uid: it makes itself non-dumpable, as the local init does, rather than leave that to the
host's ``fs.suid_dumpable``; at 1 this test found the worker in the parent's fds.)
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import sys

import pytest

from agentrl.sandboxes import ExecRequest, get_backend
from agentrl.sandboxes.command import command_box, unavailable
from agentrl.sandboxes.docker_backend import docker_status
from agentrl.sandboxes.interpreter import PythonSession

# ALLOWED is prepended per path: the fds the path documents as the program's own.
ADVERSARY = r"""
import json, os, stat
found = []

def probe(fd, where):
    rec = {"where": where, "mode": oct(os.fstat(fd).st_mode)}
    try:
        rec["link"] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    try:
        os.set_blocking(fd, False)
        rec["read"] = os.read(fd, 4096)[:40].decode("latin1")
    except OSError:
        pass
    try:
        rec["wrote"] = os.write(fd, b"FORGED-BY-SANDBOX\n")
    except OSError:
        pass
    found.append(rec)

mine = set(int(n) for n in os.listdir("/proc/self/fd"))
for fd in sorted(set(range(3, 1 << 16)) | mine):
    if fd not in ALLOWED:
        try:
            os.fstat(fd)
        except OSError:
            continue
        probe(fd, f"fd {fd}")
for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
    try:
        subs = ["fd", *(f"task/{t}/fd" for t in os.listdir(f"/proc/{pid}/task"))]
    except OSError:
        continue
    for sub in subs:
        try:
            names = os.listdir(f"/proc/{pid}/{sub}")
        except OSError:
            continue
        for n in names:
            for flags in (os.O_RDWR, os.O_RDONLY, os.O_WRONLY):
                try:
                    fd = os.open(f"/proc/{pid}/{sub}/{n}", flags | os.O_NONBLOCK)
                    break
                except OSError:
                    fd = -1
            if fd < 0:
                found.append({"where": f"/proc/{pid}/{sub}/{n}", "listed": True})
                continue
            probe(fd, f"/proc/{pid}/{sub}/{n}")
            os.close(fd)
print("\nREPORT " + json.dumps(found), flush=True)
"""
PLAIN = "ALLOWED = {0, 1, 2, 3}  # stdio and the verdict pipe (_harness.VERDICT_FD)\n"
SESSION = (  # the worker's own command and status pipes (_harness._cells)
    "import sys\nf = sys._getframe()\nwhile f.f_code.co_name != '_cells':\n    f = f.f_back\n"
    "ALLOWED = {0, 1, 2, f.f_locals['cmd'], f.f_locals['rep']}\n"
)
COMMAND = "ALLOWED = {0, 1, 2}\n"


class HeldFds:
    """300+ fds of the host: /dev/null, and pipes and socket pairs it still reads, each end
    with bytes waiting; every seventh inheritable."""

    def __init__(self) -> None:
        self.fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(100)]
        self.readers: list[int] = []
        for _ in range(50):
            r, w = os.pipe()
            os.write(w, b"host-secret")
            self.fds += [r, w]
            self.readers.append(r)
        for _ in range(50):
            a, b = socket.socketpair()
            a.sendall(b"host-secret")
            b.sendall(b"host-secret")
            self.fds += [a.detach(), b.detach()]
            self.readers += self.fds[-2:]
        for fd in self.fds[::7]:
            os.set_inheritable(fd, True)

    def forged(self) -> list[int]:
        """The host's fds on which something wrote."""
        hit = []
        for fd in self.readers:
            os.set_blocking(fd, False)
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                continue
            if b"FORGED" in data:
                hit.append(fd)
        return hit

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)


def _command(code: str) -> str:
    """As a harness agent runs (``harness._wait``): bwrap with the box's fds passed."""

    async def go() -> str:
        async with command_box(1) as box:
            argv = box.argv([sys.executable, "-c", code], {}, (), 16)
            assert all(fd > 300 for fd in box.fds), box.fds  # the seccomp fd, past the host's
            p = await asyncio.create_subprocess_exec(
                *argv, pass_fds=box.fds, stdout=-1, stderr=-1, start_new_session=True
            )
            out, err = await asyncio.wait_for(p.communicate(), 60)
            return out.decode() + err.decode()

    return asyncio.run(go())


def _run(path: str) -> tuple[str, str]:
    if path == "command":
        return "ok", _command(COMMAND + ADVERSARY)
    if path == "session":
        backend = get_backend("local")
        try:
            with PythonSession(backend, timeout_s=30, max_output_bytes=1 << 20) as py:
                res = py.execute(SESSION + ADVERSARY)
        finally:
            backend.close()
    else:  # a zygote started while the host holds them: its socket gets a high host number
        backend = get_backend(path, pool_size=1) if path == "local" else get_backend(path)
        try:
            res = backend.run(ExecRequest(PLAIN + ADVERSARY, timeout_s=30))
        finally:
            backend.close()
    return res.status, res.stdout + res.stderr


@pytest.mark.parametrize(
    "path", ["local", "session", "command", pytest.param("docker", marks=pytest.mark.docker)]
)
def test_a_host_holding_many_fds_gives_the_sandbox_none(path: str) -> None:
    reason = unavailable() if path != "docker" else docker_status()[1]
    if path != "docker" and reason or path == "docker" and reason != "ok":
        pytest.skip(reason)
    held = HeldFds()
    try:
        status, out = _run(path)
        report = out.rpartition("\nREPORT ")[2].split("\n")[0]
        assert json.loads(report) == [], report
        assert held.forged() == []
        assert status == "ok", out
    finally:
        held.close()


def test_fds_past_the_range_close_are_closed_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_close_all_but`` closes below ``_FD_SCAN`` (65536) by range and lists the rest: a
    host allowed more fds (docker's default hard RLIMIT_NOFILE is 2**20) and holding 65536
    passes numbers past it. This box cannot make one (its hard limit is below, and raising it
    needs CAP_SYS_RESOURCE), so a lower ``_FD_SCAN`` stands in: numbers past it, kept or not."""
    from agentrl.sandboxes import _harness

    monkeypatch.setattr(_harness, "_FD_SCAN", 64)
    high = min(5000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 1)
    assert high > 300
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # only os calls in the child of a threaded process
        try:
            null = os.open("/dev/null", os.O_RDONLY)
            for fd in (100, 300, high):
                os.dup2(null, fd)
            os.dup2(w, 200)
            _harness._close_all_but({0, 1, 2, 200})

            def is_open(fd: int) -> bool:
                try:
                    os.fstat(fd)
                except OSError:
                    return False
                return True

            left = [fd for fd in (null, r, w, 100, 200, 300, high) if is_open(fd)]
            os.write(200, json.dumps(left).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        left = json.loads(f.read() or b"null")
    os.waitpid(pid, 0)
    assert left == [200]
