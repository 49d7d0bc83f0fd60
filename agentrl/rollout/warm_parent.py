"""A warm parent for `module:function` agents: their libraries imported once, each run forked.

Why: a fresh interpreter per agent run pays the agent's imports every time. The OpenAI Agents
SDK is ~2.7 s of CPU a run on this project's 2-core box (`agents` + `openai`); a GPU step of
128 runs spent ~350 CPU-seconds importing before any request reached the gateway. With
`rollout.harness.preload: [agents]` one parent process imports those modules once and every
run is a fork of it that imports only the user's module (~0.3 s for `agents_sdk_calc`).

What a run still gets, as from a fresh interpreter: its own process and process group (the
group is killed when the run ends or times out, so nothing it started outlives it), stdin
/dev/null, exactly the environment and working directory it was given, fds 0-2 only, the
user's module imported in the child under that environment (a module-level client reads
`OPENAI_BASE_URL` at import: importing it in the parent would give every run the first run's
session), Python's `random` reseeded (os.register_at_fork) and numpy's global generator
reseeded if it was preloaded. What differs: the hash seed (`PYTHONHASHSEED`) is the parent's,
and stdout/stderr are files the trainer reads after the run, not pipes.

What the parent never holds: another run's request. It reads only `{"run": id, "dir": path}`;
the child reads its environment from `path/request.json` after the fork, so no run's memory
has another's session URL or task in it. A preloaded module that starts a thread at import is
refused at start (a fork copies only the calling thread: a lock the other thread held stays
locked in every child).

This file is run by path (`python -c "runpy.run_path(...)" warm_parent.py CHILD MODULE...`),
like `agent_child.py`, so the parent imports only the standard library and the preloaded
modules; the trainer imports `WarmParent` from it as a module.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import json
import os
import runpy
import selectors
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

READY_TIMEOUT_S = 300.0  # the parent's start: its preload imports (a cold disk is slow)
REQUEST = "request.json"
STDOUT, STDERR = "stdout", "stderr"
OUT_TAIL = 64 * 1024  # bytes of a run's stdout kept (its answer is its last line)
RUN_BY_PATH = ["-c", "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__main__')"]


class ParentError(RuntimeError):
    """The warm parent could not start (a preload failed) or went away."""


class WarmParent:
    """The trainer's side: starts the parent on the calling event loop and runs agents in it.

    One parent serves every run of a harness; it is started by the first run, restarted by
    the run after it died, and stopped by `close()`."""

    def __init__(
        self, preload: list[str], env: dict[str, str], cwd: str, child: str, kill_wait_s: float
    ) -> None:
        self.preload, self.env, self.cwd, self.child = list(preload), dict(env), cwd, child
        self.kill_wait_s = kill_wait_s
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._runs: dict[int, asyncio.Future[int]] = {}
        self._next = 0
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        """The parent's pid while it runs."""
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        """Start the parent now (else its first run does): a preload that fails raises here,
        once, as ParentError naming the module, rather than failing every episode."""
        await self._started()

    async def _started(self) -> asyncio.subprocess.Process:
        async with self._lock:
            if self._proc is not None and self._proc.returncode is None:
                return self._proc
            proc = await asyncio.create_subprocess_exec(
                sys.executable, *RUN_BY_PATH, __file__, self.child, *self.preload,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=self.env, cwd=self.cwd,
                start_new_session=True,
            )  # fmt: skip
            assert proc.stdout is not None and proc.stderr is not None
            try:
                line = await asyncio.wait_for(proc.stdout.readline(), READY_TIMEOUT_S)
            except asyncio.TimeoutError:
                line = b""
            if not line.startswith(b'{"ready"'):
                with contextlib.suppress(ProcessLookupError):  # it may have exited already
                    proc.kill()
                err = (await proc.stderr.read()).decode(errors="replace").strip()
                await proc.wait()
                last = err.splitlines()[-1] if err else "no output"
                raise ParentError(
                    f"rollout.harness.preload {self.preload}: the warm parent did not start "
                    f"(status {proc.returncode}): {last}"
                )
            self._proc = proc
            self._reader = asyncio.ensure_future(self._read(proc))
            return proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        """Exit codes back to their runs; at EOF every pending run fails."""
        assert proc.stdout is not None and proc.stderr is not None
        drain = asyncio.ensure_future(proc.stderr.read())  # a full pipe would stall it
        async for line in proc.stdout:
            msg = json.loads(line)
            fut = self._runs.pop(msg["exit"], None)
            if fut is not None and not fut.done():
                fut.set_result(int(msg["code"]))
        await proc.wait()
        err = (await drain).decode(errors="replace").strip()
        why = f"the warm parent exited ({proc.returncode})" + (f": {err[-500:]}" if err else "")
        runs, self._runs = self._runs, {}
        for fut in runs.values():
            if not fut.done():
                fut.set_exception(ParentError(why))

    def _send(self, proc: asyncio.subprocess.Process, msg: dict[str, Any]) -> None:
        assert proc.stdin is not None
        with contextlib.suppress(ConnectionError, RuntimeError):  # gone: _read fails the runs
            proc.stdin.write(json.dumps(msg).encode() + b"\n")

    async def run(
        self, env: dict[str, str], cwd: str, folder: str, timeout_s: float
    ) -> tuple[str, int, str, str]:
        """Fork one run with `env` and `cwd`; its stdout/stderr go to files in `folder` (the
        run's own, private). Returns (status "ok"/"timeout", exit code, stdout tail, stderr)."""
        proc = await self._started()
        path = Path(folder)
        fd = os.open(path / REQUEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"env": env, "cwd": cwd}, f)
        self._next += 1
        run_id = self._next
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._runs[run_id] = fut
        self._send(proc, {"run": run_id, "dir": folder})
        status = "ok"
        try:
            code = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except asyncio.TimeoutError:
            status = "timeout"
            self._send(proc, {"kill": run_id})
            code = await asyncio.wait_for(fut, self.kill_wait_s)
        except asyncio.CancelledError:  # a stopped run: its group goes with it
            self._send(proc, {"kill": run_id})
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, ParentError):
                await asyncio.wait_for(fut, self.kill_wait_s)
            raise
        return status, code, _tail(path / STDOUT, OUT_TAIL), _tail(path / STDERR, OUT_TAIL)

    async def close(self) -> None:
        """Stop the parent: it kills every run still going, then exits."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), self.kill_wait_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
        if self._reader is not None:
            await asyncio.wait_for(self._reader, self.kill_wait_s)


def _tail(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            return f.read(limit).decode(errors="replace")
    except FileNotFoundError:
        return ""


# ---- the parent process itself: this file run by path (RUN_BY_PATH) ----


def _serve(child_path: str, preload: list[str]) -> int:
    try:  # each run's exit is watched through a pidfd (Linux 5.3+)
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError) as e:
        print(f"a warm parent needs pidfds (Linux 5.3+): {e}", file=sys.stderr)
        return 2
    for name in preload:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 - reported to the trainer, which raises
            print(f"cannot import {name!r}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:
        print(
            f"the preloaded modules {preload} started {threads - 1} thread(s); a fork copies "
            "only the calling thread, so such a module cannot be preloaded",
            file=sys.stderr,
        )
        return 2
    agent = runpy.run_path(child_path)  # agent_child's functions, standard library only
    gc.collect()
    gc.freeze()  # the children's collections leave the parent's objects (and pages) alone
    ctl_in, ctl_out = sys.stdin.fileno(), sys.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(ctl_in, selectors.EVENT_READ, None)
    runs: dict[int, tuple[int, int]] = {}  # run id -> (pid, pidfd), until reaped
    _report(ctl_out, {"ready": os.getpid()})
    try:
        _loop(sel, ctl_in, ctl_out, runs, agent["main"])
    finally:  # the trainer closed us or went away (EOF, a broken pipe): no run outlives us
        for pid, _ in runs.values():
            _killpg(pid)
        for pid, pidfd in runs.values():
            os.waitpid(pid, 0)
            os.close(pidfd)
    return 0


def _loop(
    sel: selectors.BaseSelector,
    ctl_in: int,
    ctl_out: int,
    runs: dict[int, tuple[int, int]],
    main: Any,
) -> None:
    """Fork a run per `{"run", "dir"}` line, kill one per `{"kill"}`, report each exit. The
    selector's data is None for the control pipe, the run id for a run's pidfd."""
    buf = b""
    while True:
        for key, _ in sel.select():
            if key.data is None:  # the trainer's control line(s)
                data = os.read(ctl_in, 65536)
                if not data:
                    return
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    msg = json.loads(line)
                    if "kill" in msg:
                        if msg["kill"] in runs:  # not reaped: the pid is still this group's
                            _killpg(runs[msg["kill"]][0])
                        continue
                    sys.stdout.flush(), sys.stderr.flush()
                    try:
                        pid = os.fork()
                    except OSError as e:  # no process to be had: this run fails, not all
                        _write_err(msg["dir"], f"warm parent: cannot fork: {e}")
                        _report(ctl_out, {"exit": msg["run"], "code": 1})
                        continue
                    if pid == 0:
                        os._exit(_child(msg["dir"], main))
                    pidfd = os.pidfd_open(pid)
                    runs[msg["run"]] = (pid, pidfd)
                    sel.register(pidfd, selectors.EVENT_READ, msg["run"])
            else:  # a run's process ended: its group goes, then it is reaped
                run_id = key.data
                pid, pidfd = runs.pop(run_id)
                _killpg(pid)  # still a zombie, so the group id cannot have been reused
                _, status = os.waitpid(pid, 0)
                sel.unregister(pidfd)
                os.close(pidfd)
                _report(ctl_out, {"exit": run_id, "code": os.waitstatus_to_exitcode(status)})


def _report(fd: int, msg: dict[str, Any]) -> None:
    os.write(fd, json.dumps(msg).encode() + b"\n")


def _write_err(folder: str, text: str) -> None:
    with open(os.path.join(folder, STDERR), "a", encoding="utf-8") as f:
        print(text, file=f)


def _killpg(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _child(folder: str, main: Any) -> int:
    """One run, in the forked child: its own group, fds, environment and directory, then
    agent_child's main. Never returns into the parent's loop."""
    try:
        os.setsid()
        fds = [
            os.open(os.devnull, os.O_RDONLY),
            os.open(os.path.join(folder, STDOUT), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
            os.open(os.path.join(folder, STDERR), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
        ]
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the control pipes' copies, pidfds
        with open(os.path.join(folder, REQUEST), encoding="utf-8") as f:
            req = json.load(f)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.argv = [sys.argv[2]] * 2  # what agent_child.py run by path (RUN_BY_PATH) shows
        if "numpy" in sys.modules:  # a fresh interpreter would seed it from the OS
            sys.modules["numpy"].random.seed()
    except BaseException:  # noqa: BLE001 - the run fails with the reason on its stderr
        traceback.print_exc()
        return 1
    try:
        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int | None):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as an uncaught exception in `python` would
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    return int(code or 0)


if __name__ == "__main__":
    # argv: ["-c", this file, agent_child.py, *preload] (RUN_BY_PATH)
    sys.exit(_serve(sys.argv[2], sys.argv[3:]))
