"""A persistent Python process inside one local sandbox, for code-interpreter tools.

State (variables, imports, files in ``/work``) persists across :meth:`PythonSession.execute`
calls of one episode; :meth:`reset` starts a fresh sandbox and :meth:`close` kills it. A cell
that times out or floods its output kills the sandbox, and the next call starts a new one
(state is lost, and the result's stderr says so). As in Jupyter, a trailing expression's
``repr`` is printed. Isolation and threat model are the ``local`` backend's (see
``local.py``), except that cells of one session share their process by design.

Cells run in a worker process; a trusted parent in the same sandbox writes each cell's end
marker with a per-cell token the worker never sees, so no output of a cell can forge the end
of a cell. A cell can still have its status reported early (the worker's status pipe is its
own: a cell may write on it), which is no more than a cell leaving a thread running: between
cells the sandbox's cgroup is frozen, so what a cell left behind gets no CPU until the next
cell, whose time limit then covers it, and its output lands in later cells' results. None of
this touches a reward: the session is the agent's own tool, never a grader.

>>> with PythonSession() as py:
...     _ = py.execute("x = 20")
...     py.execute("x + 22").stdout
'42\\n'
"""

from __future__ import annotations

import secrets
import time

from . import _io
from ._seccomp import denylist_bpf
from ._zygote import SandboxProcess
from .base import ExecRequest, ExecResult
from .local import ENV, LocalBackend

MARK = b"\x1e"
RESTARTED = "\n[sandbox restarted: session state was lost]\n"


class PythonSession:
    """One interpreter per episode. Not thread-safe: one cell at a time."""

    def __init__(
        self,
        backend: LocalBackend | None = None,
        timeout_s: float = 10.0,
        memory_mb: int = 512,
        max_output_bytes: int = 64 << 10,
        files: dict[str, str | bytes] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        # ExecRequest validates every limit, naming the bad one, before a sandbox starts.
        ExecRequest("", timeout_s=timeout_s, max_output_bytes=max_output_bytes)
        self._setup = ExecRequest("", memory_mb=memory_mb, files=files or {}, env=env or {})
        self.backend = backend or LocalBackend()
        self.timeout_s, self.max_output_bytes = timeout_s, max_output_bytes
        self._box: SandboxProcess | None = None

    @property
    def alive(self) -> bool:
        return self._box is not None and self._box.proc.poll() is None

    def _start(self) -> SandboxProcess:
        box = self.backend.start("session")
        if box.cgroup is not None:
            box.cgroup.set_limits(self._setup.memory_mb << 20, self.backend.pids, self.backend.cpus)
        limits = self.backend.limits(self._setup, cpu=False)
        box_stdin = box.proc.stdin
        assert box_stdin is not None
        body = _io.payload(self._setup, ENV, limits) | {"seccomp": denylist_bpf()}
        box_stdin.write(_io.frame(body))
        box_stdin.flush()
        self._box = box
        return box

    def execute(self, code: str, timeout_s: float | None = None) -> ExecResult:
        """Run one cell; ``status`` is ``ok``/``error`` (exception) or a limit status."""
        if timeout_s is not None:
            ExecRequest("", timeout_s=timeout_s)  # nan/inf/0/negative: ValueError naming it
        restarted = self._box is not None and not self.alive
        if restarted:
            self.close()
        box = self._box or self._start()
        if box.cgroup is not None:
            box.cgroup.freeze(False)
        token = secrets.token_hex(8)
        tail = MARK + token.encode() + b":"
        start = time.monotonic()
        try:
            box.proc.stdin.write(_io.frame({"code": code, "token": token}))  # type: ignore[union-attr]
            box.proc.stdin.flush()  # type: ignore[union-attr]
        except BrokenPipeError:
            pass

        def done(p: _io.Pumped) -> bool:
            return tail in p.out and p.err.endswith(b"\n") and tail in p.err

        limit = timeout_s or self.timeout_s
        got = _io.pump(box.fds, start + limit, self.max_output_bytes + 64, done)
        wall = time.monotonic() - start
        finished = done(got)
        status = "ok"
        if finished:
            got.out, rest = got.out.split(tail, 1)
            got.err = got.err.split(tail, 1)[0]
            cell = rest.split(b"\n", 1)[0].decode()
            status = {"ok": "ok", "error": "error", "exit": "ok"}.get(cell, "error")
            if len(got.out) > self.max_output_bytes or len(got.err) > self.max_output_bytes:
                got.truncated = True
        if not finished or got.truncated:
            oom = box.cgroup.oom_count() > 0 if box.cgroup else False
            self.close()
            req = ExecRequest(code, timeout_s=limit, memory_mb=self._setup.memory_mb)
            code_ = None if got.timed_out or got.truncated else box.proc.returncode
            status = _io.classify(code_, got, oom, None, req) if not finished else "output_limit"
            if status == "ok":
                status = "killed"
            got.err += RESTARTED.encode()
        else:
            if box.cgroup is not None:
                box.cgroup.freeze()
            if restarted:
                got.err += RESTARTED.encode()
        got.out, got.err = got.out[: self.max_output_bytes], got.err[: self.max_output_bytes + 64]
        return _io.result(status, 0 if status == "ok" else None, got, wall, None)  # type: ignore[arg-type]

    def reset(self) -> None:
        """Forget all state: kill the sandbox and start a fresh one lazily."""
        self.close()

    def close(self) -> None:
        if self._box is not None:
            self._box.close()
            self._box = None

    def __enter__(self) -> PythonSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
