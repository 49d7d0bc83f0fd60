"""``docker`` backend: one throwaway container per run, via the docker SDK.

The image is the tiny local ``agentrl-sandbox:base`` (``scripts/setup-sandbox.sh``: an empty
rootfs of mount points, no registry). Each run starts a container with ``--network none``, a
read-only root, the host ``/usr`` and Python prefix bind-mounted read-only, size-capped tmpfs
``/work`` and ``/tmp``, memory (= memory+swap), pids and CPU limits, all capabilities dropped,
``no-new-privileges``, a random unprivileged uid and rlimits. The request travels over the
attach stream (read by the same ``_runner.py`` as the local backend, in ``once`` mode) and the
output streams back through it with a hard cap; logging is off so nothing is buffered on disk.
On timeout or flood the container is killed; it is always removed.

Threat model.
Covered: host files and env vars (only the read-only binds are visible), networking, host
processes, writes outside tmpfs, fork/memory/disk bombs, CPU burners, output floods, daemons
(they die with the container's pid namespace), state between runs (fresh container each run).
Not covered: kernel exploits (docker's default seccomp profile narrows them), side channels,
anyone who can reach the docker socket (root-equivalent on the host), world-readable files
under ``/usr`` and the Python prefix. Start-up is ~0.3 s per run, so prefer ``local``.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import sys
import time

from . import _io
from .base import ExecRequest, ExecResult, SandboxBackend
from .local import ENV, RUNNER, _python_dirs, new_uid

IMAGE = os.environ.get("AGENTRL_SANDBOX_IMAGE", "agentrl-sandbox:base")


def docker_status(image: str = IMAGE) -> tuple[bool, str]:
    """``(usable, reason)``: whether an engine answers and the base image exists."""
    try:
        import docker

        client = docker.from_env(timeout=5)
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
        self, image: str = IMAGE, pids: int = 64, cpus: float = 1.0, disk_mb: int = 64
    ) -> None:
        import docker

        self.client = docker.from_env(timeout=30)
        self.image, self.pids, self.cpus, self.disk_mb = image, pids, cpus, disk_mb
        self.binds = [*_python_dirs(os.path.realpath(sys.executable)), "/usr"]
        if os.path.exists("/etc/ld.so.cache"):
            self.binds.append("/etc/ld.so.cache")
        self.python = sys.executable
        import site

        self.site_dirs = ":".join(site.getsitepackages())

    def _create(self, req: ExecRequest, uid: int):
        from docker.types import LogConfig, Ulimit

        tmpfs = f"size={self.disk_mb}m,mode=1777"
        lim = _io.rlimits(req, self.pids, self.disk_mb << 20)
        return self.client.containers.create(
            self.image,
            command=[self.python, "-I", "-S", "-c", RUNNER, "-", "once", self.site_dirs],
            stdin_open=True,
            network_mode="none",
            read_only=True,
            tmpfs={"/work": tmpfs, "/tmp": tmpfs},
            volumes={p: {"bind": p, "mode": "ro"} for p in self.binds},
            mem_limit=req.memory_mb << 20,
            memswap_limit=req.memory_mb << 20,
            shm_size=self.disk_mb << 20,
            pids_limit=self.pids,
            nano_cpus=int(self.cpus * 1e9),
            user=f"{uid}:{uid}",
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ulimits=[Ulimit(name="nofile", soft=lim["nofile"], hard=lim["nofile"])],
            environment={},
            working_dir="/work",
            hostname="sandbox",
            log_config=LogConfig(type="none"),
        )

    def run(self, request: ExecRequest) -> ExecResult:
        start = time.monotonic()
        try:
            box = self._create(request, new_uid())
        except Exception as exc:  # noqa: BLE001 - engine trouble is a sandbox error, not a crash
            return ExecResult("sandbox_error", stderr=f"docker create failed: {exc}")
        try:
            conn = box.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            sock: socket.socket = conn._sock
            box.start()
            start = time.monotonic()
            body = _io.payload(request, ENV, _io.rlimits(request, self.pids, self.disk_mb << 20))
            sock.sendall(_io.frame(body))
            got = _demux(sock, start + request.timeout_s, request.max_output_bytes)
            if got.timed_out or got.truncated:
                _hangup(sock, conn)  # stop the engine's stream copy first, or kill stalls on it
                box.kill()
            code = box.wait(timeout=max(1.0, start + request.timeout_s - time.monotonic() + 5))
            wall = time.monotonic() - start
            box.reload()
            oom = bool(box.attrs["State"].get("OOMKilled"))
            _hangup(sock, conn)
        except Exception as exc:  # noqa: BLE001
            return ExecResult("sandbox_error", stderr=f"docker run failed: {exc}")
        finally:
            try:
                box.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        exit_code = code.get("StatusCode") if isinstance(code, dict) else None
        status = _io.classify(exit_code, got, oom, None, request)
        return _io.result(status, exit_code, got, wall, None)


def _hangup(sock: socket.socket, conn) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    conn.close()


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
