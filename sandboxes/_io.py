"""Host-side plumbing shared by backends: capped streaming reads, framing, classification.

One place decides a run's status from how it ended (:func:`classify`), and one place decides
whether the harness verdict is genuine (:func:`verified`), so both backends agree.
"""

from __future__ import annotations

import dataclasses
import marshal
import math
import os
import secrets
import select
import time
from collections.abc import Callable

from .base import ExecRequest, ExecResult, Status

SIGXCPU, SIGKILL, SIGXFSZ = 24, 9, 25
MARK = b"\x1e"


def frame(payload: dict) -> bytes:
    """Length-prefixed marshal (same interpreter on both sides; cheap to import in-sandbox)."""
    body = marshal.dumps(payload)
    return str(len(body)).encode() + b"\n" + body


def payload(req: ExecRequest, env: dict[str, str], limits: dict) -> dict:
    """The request the in-sandbox runner reads (see ``_runner.py``)."""
    files = {n: d if isinstance(d, bytes) else d.encode() for n, d in req.files.items()}
    body: dict[str, object] = {
        "code": req.code,
        "language": req.language,
        "stdin": req.stdin.encode(),
        "files": files,
        "env": {**env, **req.env},
        "limits": limits,
    }
    if req.check is not None:  # the judge writes MARK + nonce once every test ran
        nonce = secrets.token_hex(16).encode()
        body.update(tests=True, support=req.support, remote=list(req.remote))
        body.update(check=req.check, nonce=nonce)
    return body


SECRET_KEYS = ("check", "nonce", "built")  # "built": the tests compiled (``_compiled.py``)


def split(body: dict) -> tuple[dict, dict | None]:
    """The request as the sandbox receives it: the body without the tests and the nonce,
    then those two (and the tests' code, when the host compiled them) as a second frame
    (None without tests), which the judge reads only after it has forked the candidate's
    process (``_judge.py``)."""
    if "nonce" not in body:
        return body, None
    public = {k: v for k, v in body.items() if k not in SECRET_KEYS}
    return public, {k: body[k] for k in SECRET_KEYS if k in body}


def verified(body: dict, verdict: bytes | None) -> bool | None:
    """Whether the harness reported this run's nonce (None when the run had no tests)."""
    if "nonce" not in body:
        return None
    return verdict == MARK + body["nonce"]


def rlimits(req: ExecRequest | None, pids: int, disk_bytes: int, cpu: bool = True) -> dict:
    """Per-run rlimits; address space gets headroom since thread arenas reserve but never use."""
    mem = (req.memory_mb if req else 1024) << 20
    return {
        "cpu_s": req.cpu_limit_s if (req and cpu) else None,
        "data": mem,
        "as": mem + (1 << 30),
        "fsize": disk_bytes,
        "nofile": 256,
        "nproc": pids,
    }


@dataclasses.dataclass
class Pumped:
    out: bytearray
    err: bytearray
    truncated: bool = False
    timed_out: bool = False


def pump(
    fds: tuple[int, int],
    deadline: float,
    cap: int,
    done: Callable[[Pumped], bool] | None = None,
) -> Pumped:
    """Read both streams until EOF, ``done``, the deadline or the cap; never hold > cap each.

    ``select.poll`` rather than a ``selectors`` object: no epoll fd to create and close and
    no Python-level key bookkeeping for each of a run's two pipes (the host's share of a
    HumanEval sample is ~0.8 ms of CPU)."""
    res = Pumped(bytearray(), bytearray())
    poller = select.poll()
    bufs = {fds[0]: res.out, fds[1]: res.err}
    for fd in fds:
        poller.register(fd, select.POLLIN)
    while bufs:
        left = deadline - time.monotonic()
        if left <= 0:
            res.timed_out = True
            break
        for fd, _ in poller.poll(max(1, math.ceil(left * 1000))):
            chunk = os.read(fd, 65536)
            if not chunk:  # EOF (POLLHUP comes with it once the writer is gone)
                poller.unregister(fd)
                del bufs[fd]
                continue
            buf = bufs[fd]
            room = cap - len(buf)
            buf += chunk[: max(room, 0)]
            if len(chunk) > room:
                res.truncated = True
        if res.truncated or (done is not None and done(res)):
            break
    return res


def classify(
    exit_code: int | None,
    got: Pumped,
    oom: bool,
    cpu_s: float | None,
    req: ExecRequest,
    disk_full: bool = False,
) -> Status:
    """Map how a run ended to a status; signals arrive as -N (128+N from a shell).

    Precedence: output flood, memory (cgroup OOM kill or a final MemoryError), time (wall
    clock, SIGXCPU, or SIGKILL once the CPU limit was used: the hard RLIMIT_CPU), disk
    (SIGXFSZ, or a failed run whose tmpfs was full), any other signal, exit code.
    """
    sig = -exit_code if exit_code is not None and exit_code < 0 else None
    if exit_code is not None and exit_code > 128:
        sig = exit_code - 128
    if got.truncated:
        return "output_limit"
    if oom or _memory_error(got.err):
        return "memory"
    if got.timed_out or sig == SIGXCPU:
        return "timeout"
    if sig == SIGKILL and cpu_s is not None and cpu_s >= req.cpu_limit_s * 0.95:
        return "timeout"
    if sig == SIGXFSZ or (disk_full and exit_code != 0):
        return "disk"
    if sig is not None:
        return "killed"
    return "ok" if exit_code == 0 else "error"


def _memory_error(err: bytes | bytearray) -> bool:
    """The program died of a MemoryError or of ENOMEM (a tmpfs write over the memory limit
    fails with ENOMEM when the kernel does not OOM-kill)."""
    lines = err.rstrip().splitlines()
    return bool(lines) and lines[-1].startswith((b"MemoryError", b"OSError: [Errno 12]"))


def result(
    status: Status,
    exit_code: int | None,
    got: Pumped,
    wall_s: float,
    cpu_s: float | None,
    verified: bool | None = None,
) -> ExecResult:
    return ExecResult(
        verified=verified,
        status=status,
        exit_code=exit_code,
        stdout=got.out.decode(errors="replace"),
        stderr=got.err.decode(errors="replace"),
        truncated=got.truncated,
        wall_s=round(wall_s, 4),
        cpu_s=None if cpu_s is None else round(cpu_s, 4),
    )
