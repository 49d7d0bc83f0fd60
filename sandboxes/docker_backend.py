"""``docker`` backend: one throwaway container per run, via the docker SDK.

The image is the tiny local ``agentrl-sandbox:base`` (``scripts/setup-sandbox.sh``: an empty
rootfs of mount points, no registry). Each run starts a container with ``--network none``, a
read-only root, the host ``/usr`` and Python prefix bind-mounted read-only (or moved aside:
``image_userland`` below), size-capped tmpfs
``/work`` and ``/tmp``, memory (= memory+swap), pids and CPU limits, all capabilities dropped,
``no-new-privileges``, a random unprivileged uid and rlimits. The request travels over the
attach stream (read by the same ``_runner.py`` as the local backend, in ``once`` mode) and the
output streams back through it with a hard cap; logging is off so nothing is buffered on disk.
On timeout or flood the container is killed; it is always removed. Inside, the runner is the
container's init and forks the program (``_runner._once``), so the host learns the program's
real wait status, CPU time (a CPU-limit kill is a ``timeout``) and the harness verdict from a
report the init writes to stderr after a token the program never sees.

Threat model.
Covered: host files and env vars (only the read-only binds are visible), networking, host
processes, writes outside tmpfs, fork/memory/disk bombs, CPU burners, output floods, daemons
(they die with the container's pid namespace), state between runs (fresh container each run;
warm ones are started ahead of need but each serves exactly one run, see ``_docker_pool``).
Not covered: kernel exploits (docker's default seccomp profile narrows them), side channels,
anyone who can reach the docker socket (root-equivalent on the host), world-readable files
under ``/usr`` and the Python prefix. Start-up is ~0.3 s per container; the warm pool
(``pool_size``, default 2) takes it off the run's critical path, but ``local`` is faster.

``image_userland=True`` (Harbor tasks whose image has a shell): the same folders are bound
read-only under ``/.agentrl-host`` instead of over the image's (``_userland``), so the program
sees the image's ``/usr``, ``/bin``, ``/lib``, ``/etc`` and the same host files as above, at
moved paths, with the same packages masked. The runner is started through the host's loader
(``--library-path``, not ``LD_LIBRARY_PATH``: what it executes loads the image's libraries);
limits, seccomp, the report and the output cap are the same code. The image is as trusted as
its task's author: its files are the program's, read-only; nothing of it runs outside the
container.
"""

from __future__ import annotations

import atexit
import contextlib
import marshal
import os
import secrets
import select
import socket
import struct
import sys
import time
from typing import Any

from . import _io
from ._docker_pool import Launched, WarmContainers
from ._seccomp import denylist_bpf
from ._userland import HOST, host_runtime
from .base import ExecRequest, ExecResult, SandboxBackend, check_knobs, hidden_paths
from .local import ENV, RUNNER, new_uid, python_dirs

IMAGE = os.environ.get("AGENTRL_SANDBOX_IMAGE", "agentrl-sandbox:base")


def docker_status(image: str = IMAGE) -> tuple[bool, str]:
    """``(usable, reason)``: whether an engine answers and the base image exists."""
    try:
        import docker

        with contextlib.closing(docker.from_env(timeout=5)) as client:  # its socket is an fd
            client.ping()
            client.images.get(image)
    except ImportError:
        return False, "docker SDK not installed (pip install docker)"
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable", with the reason
        return (
            False,
            f"docker engine/image unavailable ({type(exc).__name__}: {exc}); run scripts/setup-sandbox.sh",
        )
    return True, "ok"


class DockerBackend(SandboxBackend):
    """Runs each request in a new locked-down container."""

    name = "docker"

    def __init__(
        self,
        image: str = IMAGE,
        pids: int = 64,
        cpus: float = 1.0,
        disk_mb: int = 64,
        pool_size: int = 2,
        pool_memory_mb: int | None = None,
        pool_wait_s: float = 0.0,
        pool_launches: int | None = None,
        image_userland: bool = False,
    ) -> None:
        """`pool_size` containers are kept started ahead of need (`_docker_pool`); 0 = none.

        They are made for requests of `pool_memory_mb` (default: `ExecRequest`'s default);
        `run` waits up to `pool_wait_s` for one being started, and at most `pool_launches`
        are started in total (a one-shot CLI call: one, made while it reads its files).
        `image_userland`: the image's own ``/usr``, ``/bin``, ``/lib``, ``/etc`` stay visible
        (the host's runner lives under ``/.agentrl-host``, see ``_userland``); by default the
        host's ``/usr`` and Python are bound over them.
        """
        default_mb = ExecRequest("").memory_mb if pool_memory_mb is None else pool_memory_mb
        check_knobs(
            {"pool_size": pool_size},
            {"pids": pids, "cpus": cpus, "disk_mb": disk_mb, "pool_memory_mb": default_mb},
            {"image_userland": image_userland},
        )
        import site

        import docker

        self.client = docker.from_env(timeout=30)
        self.image, self.pids, self.cpus, self.disk_mb = image, pids, cpus, disk_mb
        dirs = python_dirs(os.path.realpath(sys.executable))
        self.image_userland = image_userland
        if image_userland:
            host = host_runtime(sys.executable, dirs, site.getsitepackages())
            self.binds = host.binds
            self.mounts = {p: {"bind": HOST + p, "mode": "ro"} for p in self.binds}
            self.masked = host.hidden(hidden_paths(self.binds))
            self.runner = [*host.argv, "-I", "-S", "-c", RUNNER, "-", "once", host.site_dirs]
        else:
            self.binds = [*dirs, "/usr"]
            if os.path.exists("/etc/ld.so.cache"):
                self.binds.append("/etc/ld.so.cache")
            self.mounts = {p: {"bind": p, "mode": "ro"} for p in self.binds}
            self.masked = hidden_paths(self.binds)
            site_dirs = ":".join(site.getsitepackages())
            self.runner = [sys.executable, "-I", "-S", "-c", RUNNER, "-", "once", site_dirs]
        self.pool_wait_s = pool_wait_s
        self.pool = (
            WarmContainers(self._launch, pool_size, default_mb, pool_launches)
            if pool_size
            else None
        )
        if self.pool is not None:  # warm containers must not outlive the process
            atexit.register(self.pool.close)

    def _create(self, memory_mb: int, uid: int):
        from docker.types import LogConfig, Ulimit

        tmpfs = f"size={self.disk_mb}m,mode=1777"
        nofile = _io.rlimits(None, self.pids, self.disk_mb << 20)["nofile"]
        return self.client.containers.create(
            self.image,
            command=self.runner,
            stdin_open=True,
            network_mode="none",
            read_only=True,
            tmpfs={
                "/work": tmpfs,
                "/tmp": tmpfs,
                **dict.fromkeys(self.masked, "size=1k,mode=0555"),
            },
            volumes=self.mounts,
            mem_limit=memory_mb << 20,
            memswap_limit=memory_mb << 20,
            shm_size=self.disk_mb << 20,
            pids_limit=self.pids,
            nano_cpus=int(self.cpus * 1e9),
            user=f"{uid}:{uid}",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ulimits=[Ulimit(name="nofile", soft=nofile, hard=nofile)],
            environment={},
            # Docker makes a missing working dir (0755, root) before mounting the /work tmpfs,
            # which then keeps that mode; the runner changes into /work itself.
            working_dir="/" if self.image_userland else "/work",
            hostname="sandbox",
            log_config=LogConfig(type="none"),
            labels={"agentrl.sandbox": "1", "agentrl.pid": str(os.getpid())},  # who made it
        )

    def _launch(self, memory_mb: int) -> Launched:
        """Create, attach and start a container; its runner then waits for the request."""
        box = self._create(memory_mb, new_uid())
        try:
            conn = box.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            box.start()
        except Exception:
            box.remove(force=True)
            raise
        return Launched(box, conn, conn._sock, memory_mb)

    def run(self, request: ExecRequest) -> ExecResult:
        warm = self.pool.take(request.memory_mb, self.pool_wait_s) if self.pool else None
        try:
            launched = warm or self._launch(request.memory_mb)
        except Exception as exc:  # noqa: BLE001 - engine trouble is a sandbox error, not a crash
            return ExecResult("sandbox_error", stderr=f"docker create failed: {exc}")
        try:
            return self._serve(launched, request)
        except Exception as exc:  # noqa: BLE001
            return ExecResult("sandbox_error", stderr=f"docker run failed: {exc}")
        finally:
            launched.discard()

    def _serve(self, launched: Launched, request: ExecRequest) -> ExecResult:
        box, sock = launched.box, launched.sock
        start = time.monotonic()
        deadline = start + request.timeout_s
        body = _io.payload(request, ENV, _io.rlimits(request, self.pids, self.disk_mb << 20))
        body["seccomp"] = denylist_bpf()
        token = secrets.token_hex(16)
        try:  # the request, then the report token (read by the init after it forked)
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            public, tests = _io.split(body)  # the tests follow the request (_runner._once)
            frames = _io.frame(public) + (_io.frame(tests) if tests is not None else b"")
            sock.sendall(frames + _io.frame({"token": token}))
            got = _demux(sock, deadline, request.max_output_bytes)
        except TimeoutError:
            got = _io.Pumped(bytearray(), bytearray(), timed_out=True)
        if got.timed_out or got.truncated:
            launched.hangup()  # stop the engine's stream copy first, or kill stalls on it
            kill(box)
        code = box.wait(timeout=max(1.0, deadline - time.monotonic() + 5))
        wall = time.monotonic() - start
        box.reload()
        oom = bool(box.attrs["State"].get("OOMKilled"))
        exit_code = code.get("StatusCode") if isinstance(code, dict) else None
        report = _take_report(got, token)
        cpu = report.get("cpu")
        if "wait" in report:
            exit_code = os.waitstatus_to_exitcode(report["wait"])
        status = _io.classify(exit_code, got, oom, cpu, request, bool(report.get("full")))
        verified = _io.verified(body, report.get("verdict"))
        return _io.result(status, exit_code, got, wall, cpu, verified)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self.client.close()  # its connection pool's sockets (an fd each, per backend made)


def kill(box: Any) -> None:
    """Kill `box` unless it has already stopped: a program that ends right at its deadline
    exits between the timeout and the kill, and the engine answers that kill with 409 (not
    running) or 404 (gone). That is the program's timeout, not a sandbox failure."""
    from docker.errors import APIError

    try:
        box.kill()
    except APIError as exc:
        if exc.status_code not in (404, 409):
            raise


def _take_report(got: _io.Pumped, token: str) -> dict:
    """Cut the init's report (``MARK token hex(marshal) \\n``) out of stderr; {} if absent.

    The init writes it once, after the program ended, as the last line: a second copy, or
    bytes after it, mean something else knew the token (or wrote after the init), so then
    there is no report at all (no verdict; the container's exit code stands)."""
    key = _io.MARK + token.encode()
    at = got.err.find(key)
    end = got.err.find(b"\n", at)
    if at < 0 or got.err.find(key, at + 1) >= 0 or end != len(got.err) - 1:
        return {}
    raw = bytes(got.err[at + len(key) : end])
    del got.err[at : end + 1]
    try:
        return marshal.loads(bytes.fromhex(raw.decode()))
    except (ValueError, EOFError, TypeError):
        return {}


def _demux(sock: socket.socket, deadline: float, cap: int) -> _io.Pumped:
    """Read docker's multiplexed attach stream (8-byte headers) with a cap and deadline."""
    res = _io.Pumped(bytearray(), bytearray())
    pending = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            res.timed_out = True
            return res
        ready, _, _ = select.select([sock], [], [], left)
        if not ready:
            continue
        chunk = sock.recv(65536)
        if not chunk:
            return res
        pending += chunk
        while len(pending) >= 8:
            kind, size = struct.unpack(">BxxxL", pending[:8])
            if len(pending) < 8 + size:
                break
            data, pending = pending[8 : 8 + size], pending[8 + size :]
            buf = res.err if kind == 2 else res.out
            room = cap - len(buf)
            buf += data[: max(room, 0)]
            if len(data) > room:
                res.truncated = True
                return res
