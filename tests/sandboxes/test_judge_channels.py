"""The candidate reaches none of the judge's channels, and its run decides no other run's verdict.

Why: the judge (the run's init) holds the control socket to the host (on which the tests,
compiled by the host, and the nonce arrive, and its reply leaves), the verdict pipe and the
zygote's hand-off pipes. A candidate holding any of them could read the tests' expected values
or the nonce, forge a passing reply, or leave a frame on the socket that the host reads as
the next run's reply (the host's compile cache hands every sample of a group the same tests:
a run that spoke for another would score a wrong sample). The candidate has full Python from
its first line: it tries every fd number it has and every fd and memory path of every process
it can see, from a child that keeps racing while the tests run.
"""

from __future__ import annotations

import os

import pytest

from agentrl.sandboxes import ExecRequest, get_backend, run_many

SECRET = "7f3a-expected-value-token"
TESTS = f"assert add(1, 2) == 3, {SECRET!r}\nassert add(2, 2) == 4\n"
RIGHT = "def add(a, b):\n    return a + b\n"
# Reads what it can (looking for the tests or a nonce), writes a forged passing reply frame
# (``len\n`` + marshal, as the init's) and a forged verdict on every channel it finds.
WRONG = r"""
import marshal, os, re, sys, time
FORGED = marshal.dumps({"wait": 0, "cpu": 0.0, "verdict": b"\x1e" + b"0" * 32, "full": False})
FRAME = str(len(FORGED)).encode() + b"\n" + FORGED
frame = sys._getframe()
while frame.f_code.co_name != "_player":  # the player's own two pipes to the judge
    frame = frame.f_back
MINE = {0, 1, 2, frame.f_locals["rd"], frame.f_locals["wr"]}

def probe(fd, where):
    try:
        os.set_blocking(fd, False)
        data = os.read(fd, 1 << 16)
        if data:
            print("READ", where, data[:200], flush=True)
    except OSError:
        pass
    for blob in (FRAME, b"\x1e" + b"0" * 32):
        try:
            os.write(fd, blob)
            print("WROTE", where, flush=True)
        except OSError:
            pass

def sweep():
    for fd in range(3, 1024):
        if fd not in MINE:
            try:
                os.fstat(fd)
            except OSError:
                continue
            probe(fd, f"fd {fd}")
    for pid in (p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        for sub in ("fd", *(f"task/{t}/fd" for t in os.listdir(f"/proc/{pid}/task"))):
            try:
                names = os.listdir(f"/proc/{pid}/{sub}")
            except OSError:
                continue
            for n in names:
                try:
                    fd = os.open(f"/proc/{pid}/{sub}/{n}", os.O_RDWR | os.O_NONBLOCK)
                except OSError:
                    continue
                probe(fd, f"/proc/{pid}/{sub}/{n}")
                os.close(fd)
        for name in ("mem", "environ", "cmdline"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    if re.search(rb"[0-9a-f]{32}|expected-value", f.read(1 << 20)):
                        print("LEAK", pid, name, flush=True)
            except OSError:
                pass

if os.fork() == 0:  # keeps racing while the judge reads the tests and runs them
    end = time.monotonic() + 2
    while time.monotonic() < end:
        sweep()
    os._exit(0)
sweep()

def add(a, b):
    sweep()
    return a - b
"""


@pytest.fixture(autouse=True)
def _needs_local(local):
    """Skips (through ``conftest.local``) where the local sandbox cannot run."""


def test_the_candidate_holds_none_of_the_judges_channels(local):
    res = local.run(ExecRequest(WRONG, check=TESTS, timeout_s=20))
    assert res.verified is False and res.status == "error", res
    found = [ln for ln in res.stdout.splitlines() if ln.startswith(("READ", "WROTE", "LEAK"))]
    assert not found, found
    assert SECRET not in res.stdout


def test_a_forging_run_decides_no_other_runs_verdict(local):
    """Right and forging wrong samples of one group, judged at once on the same (cached)
    tests, each get their own verdict."""
    reqs = [ExecRequest(c, check=TESTS, timeout_s=20) for _ in range(4) for c in (RIGHT, WRONG)]
    res = run_many(reqs, backend=local, concurrency=4)
    assert [r.verified for r in res] == [True, False] * 4, [
        (r.status, r.stderr[-200:]) for r in res
    ]


def test_a_host_holding_many_fds_gives_the_candidate_none():
    """The zygote's control socket keeps the host's fd number (281 in CI, where the test
    process held that many): the judge closed only the fds below its own copies, and the
    candidate wrote forged replies on the socket, which the next runs' inits read as their
    requests (and died). Now none: and the backend's next runs are judged as usual."""
    held = [os.open("/dev/null", os.O_RDONLY) for _ in range(300)]
    backend = get_backend("local", pool_size=1)
    try:
        res = backend.run(ExecRequest(WRONG, check=TESTS, timeout_s=20))
        found = [ln for ln in res.stdout.splitlines() if ln.startswith(("READ", "WROTE", "LEAK"))]
        assert not found, found
        assert (res.verified, res.status) == (False, "error"), res
        again = [backend.run(ExecRequest(c, check=TESTS, timeout_s=20)) for c in (RIGHT, WRONG)]
        assert [(r.verified, r.status) for r in again] == [(True, "ok"), (False, "error")], again
    finally:
        backend.close()
        for fd in held:
            os.close(fd)


def test_a_frame_beyond_the_reply_breaks_the_zygote():
    """Defence in depth on the host: bytes after a run's one reply (only something of the run
    could have written them) make that reply an error, so the zygote is not reused."""
    import marshal
    import socket
    import time

    from agentrl.sandboxes._zygote import Zygote

    def frame(d: dict) -> bytes:
        data = marshal.dumps(d)
        return str(len(data)).encode() + b"\n" + data

    z = object.__new__(Zygote)
    z.sock, theirs = socket.socketpair()
    try:
        theirs.sendall(frame({"wait": 0}))
        assert z._reply(time.monotonic() + 5) == {"wait": 0}
        theirs.sendall(frame({"wait": 0}) + frame({"wait": 0}))
        assert "error" in z._reply(time.monotonic() + 5)
    finally:
        z.sock.close()
        theirs.close()
