"""Host side of the local backend: one bwrap sandbox process, and the zygote protocol on it.

:class:`SandboxProcess` starts ``bwrap`` inside its own cgroup (a ``sh`` shim writes its pid
to ``cgroup.procs`` and execs bwrap, so nothing runs outside the cgroup) and can kill the
whole tree. :class:`Zygote` sends one request at a time over a unix socket together with the
write ends of two fresh pipes, then streams the program's output from the read ends. The
zygote keeps one per-run init forked and waiting, and that init (not the zygote) reads the
request, so request bytes never enter a process that outlives the run.
"""

from __future__ import annotations

import marshal
import os
import signal
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from . import _cgroup, _io
from .base import ExecRequest, ExecResult

# bwrap's --die-with-parent is PR_SET_PDEATHSIG, which fires when the *thread* that forked it
# exits; spawn from one long-lived thread so pooled sandboxes outlive short-lived workers.
_KEEPER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")
OVERHEAD_MB = 48  # zygote + its fork, charged to the same cgroup as the program
OVERHEAD_PIDS = 8


class SandboxProcess:
    """A bwrap process tree in a private cgroup."""

    def __init__(self, argv: list[str], cgroup_version: str | None, pass_fds: tuple = ()) -> None:
        self.cgroup = _cgroup.create(cgroup_version) if cgroup_version else None
        if self.cgroup is not None:
            enter = " && ".join(f"echo $$ > {f}" for f in self.cgroup.procs_files)
            argv = ["/bin/sh", "-c", f'{enter} && exec "$@"', "sh", *argv]
        self.proc = _KEEPER.submit(
            subprocess.Popen,
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={},
            pass_fds=pass_fds,
        ).result()

    @property
    def fds(self) -> tuple[int, int]:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        return self.proc.stdout.fileno(), self.proc.stderr.fileno()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup is not None:
            self.cgroup.kill_all()

    def close(self) -> None:
        """Kill whatever is left, reap, and remove the cgroup."""
        self.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
        if self.cgroup is not None:
            self.cgroup.remove()


class Zygote:
    """A warm sandboxed interpreter that forks one isolated child per request."""

    def __init__(self, argv_for_fd, cgroup_version: str | None, code: bytes | None = None) -> None:
        """``code``: the runner, marshalled, for a zygote started with ``local.BOOT``."""
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.box = SandboxProcess(
                argv_for_fd(theirs.fileno()), cgroup_version, (theirs.fileno(),)
            )
        finally:
            theirs.close()
        self.alive = True
        if code is not None:
            try:  # fits the socket buffer: no wait for the zygote to start reading
                self.sock.sendall(str(len(code)).encode() + b"\n" + code)
            except OSError:
                self.close()
                raise

    def run(self, req: ExecRequest, body: dict, pids: int, cpus: float) -> ExecResult:
        """Run one request; on timeout/flood/protocol trouble the zygote is killed (not reused).

        The deadline covers the whole request: sending it (stdin included), running, replying.
        """
        cg = self.box.cgroup
        if cg is not None:
            cg.set_limits((req.memory_mb + OVERHEAD_MB) << 20, pids + OVERHEAD_PIDS, cpus)
        oom0, cpu0 = (cg.oom_count(), cg.cpu_seconds()) if cg else (0, None)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        start = time.monotonic()
        deadline = start + req.timeout_s
        reply: dict | None = None
        try:
            public, tests = _io.split(body)
            data = marshal.dumps(public)
            socket.send_fds(self.sock, [str(len(data)).encode() + b"\n"], [out_w, err_w])
            os.close(out_w)
            os.close(err_w)
            out_w = err_w = -1
            # The tests frame is read by the judge only once the player is forked; it waits in
            # the socket either way, so it goes in the same send (one syscall, one wake-up).
            sent = self._send(data if tests is None else data + _io.frame(tests), deadline)
            got = _io.pump((out_r, err_r), deadline, req.max_output_bytes)
            got.timed_out |= not sent
            if not (got.timed_out or got.truncated):
                reply = self._reply(deadline)
        finally:
            for fd in (out_r, err_r, out_w, err_w):
                if fd >= 0:
                    os.close(fd)
        wall = time.monotonic() - start
        broken = reply is None or "wait" not in reply
        if broken:
            self.box.kill()
        oom = cg.oom_count() > oom0 if cg else False
        cpu = cg.cpu_seconds() if cg else None
        cpu = cpu - cpu0 if cpu is not None and cpu0 is not None else None
        if reply is not None and cpu is None:
            cpu = reply.get("cpu")
        if broken:
            self.close()
        if oom:  # the kernel killed something of this run (maybe its init or the zygote)
            return _io.result("memory", None, got, wall, cpu, False if "nonce" in body else None)
        if reply is not None and "error" in reply:
            got.err += f"\nsandbox error: {reply['error']}".encode()
            return _io.result("sandbox_error", None, got, wall, cpu)
        code = os.waitstatus_to_exitcode(reply["wait"]) if reply else None
        if reply is None and not (got.timed_out or got.truncated):
            if wall < req.timeout_s:  # the zygote died (e.g. could not start): not a timeout
                got.err += b"\nsandbox error: the sandbox exited without answering"
                return _io.result("sandbox_error", None, got, wall, cpu)
            got.timed_out = True  # the program finished but the zygote never answered in time
        full = bool(reply and reply.get("full"))
        status = _io.classify(code, got, oom, cpu, req, full)
        verified = _io.verified(body, reply.get("verdict") if reply else None)
        return _io.result(status, code, got, wall, cpu, verified)

    def _send(self, data: bytes, deadline: float) -> bool:
        """Send the request body before ``deadline``; False if it could not be sent in time."""
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.sock.settimeout(left)
                done += self.sock.send(view[done : done + (4 << 20)])
        except TimeoutError:
            return False
        finally:
            view.release()
        return True

    def _reply(self, deadline: float) -> dict | None:
        self.sock.settimeout(max(deadline - time.monotonic(), 0.0) + 1.0)
        try:  # the init writes the reply in one write: one recv usually takes all of it
            buf = b""
            while b"\n" not in buf:
                if len(buf) > 20:
                    return None
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    return None
                buf += chunk
            head, _, rest = buf.partition(b"\n")
            n, data = int(head), bytearray(rest)
            while len(data) < n:
                chunk = self.sock.recv(n - len(data))
                if not chunk:
                    return None
                data += chunk
            if len(data) > n:  # bytes beyond the one reply (see below)
                return {"error": "a frame beyond the run's reply on the control channel"}
            reply = marshal.loads(data)
        except (OSError, ValueError, EOFError):
            return None
        try:  # bytes beyond the one reply: something of the run wrote on the channel
            self.sock.settimeout(0)  # with a timeout, recv polls for it whatever the flags
            extra = self.sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return reply
        except OSError:
            extra = b""
        finally:
            self.sock.settimeout(None)  # blocking again: the next run's send_fds expects it
        return (
            {"error": "a frame beyond the run's reply on the control channel"} if extra else reply
        )

    def close(self) -> None:
        if self.alive:
            self.alive = False
            self.sock.close()
            self.box.close()
