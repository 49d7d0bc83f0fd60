"""A command line in a bubblewrap sandbox that reaches exactly one host TCP port on loopback.

Why: a harness rollout (``agentrl train --agent-command``) runs the user's agent program,
steered by the model being trained, and the program must talk to the trainer's recording
gateway (``127.0.0.1:PORT``) and to nothing else of the trainer: not its files (the run
folder, the data, other code), its environment, its processes, other loopback services or
other sessions. The one-shot backend (``local.py``) runs code with no network at all, so this
module builds its own ``bwrap`` command with the same isolation plus one forwarded port.

What the command sees: an empty root with read-only binds of ``/usr`` (+ ``/bin``/``/lib``
links), ``ld.so.cache``, the interpreter prefix and the host paths the caller lists
(``readonly``, e.g. the agent's own code), each at its host path; the install folders of
``base.TASK_DATA_PACKAGES`` masked; a private ``/proc`` and minimal ``/dev``; fresh
size-capped tmpfs ``/work`` (cwd and HOME) and ``/tmp``; only the environment it is given.
It runs as a random unused unprivileged uid with no capabilities and ``no_new_privs``, under
the seccomp denylist of ``_seccomp.py`` and rlimits on processes, open files and file size,
in new pid/ipc/uts/cgroup/network namespaces.

The port: the network namespace is private, so the host's 127.0.0.1 is not reachable. The
host listens on a unix socket in a root-only folder bound at ``/run/agentrl`` and relays each
connection to ``127.0.0.1:PORT``; inside, the launcher (``_launch.py``, uid 0 without
capabilities other than setuid/setgid/net_bind_service, all gone in the command) listens on
``127.0.0.1:PORT`` of the private loopback and relays to that socket. The command can open any
socket it likes, but the only thing behind its loopback is that port of the host.

The result: the command writes ``/work/result.json``; the launcher copies at most
``RESULT_MAX + 1`` bytes of it (no links, regular file only) to the root-only folder, which the
host reads after the run as untrusted bytes (``result_bytes``). Killing the ``bwrap`` process
(its process group) ends the sandbox: ``--die-with-parent`` kills the namespace's init and
the kernel every process of the namespace, daemons included. Not limited: memory (no cgroup
here; size the trainer's host for the agent), CPU share; the tmpfs sizes count as memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from ._seccomp import denylist_bpf
from .base import hidden_paths
from .local import python_dirs

LAUNCHER = (Path(__file__).parent / "_launch.py").read_text()
RESULT_MAX = 1 << 20  # bytes of /work/result.json the host accepts
UID_BASE, UID_SPAN = 2_100_000_000, 10**8  # apart from the one-shot backend's range
ENV = {
    "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "USER": "sandbox",
    "PYTHONUNBUFFERED": "1",
}
RESULT_PATH = "/work/result.json"  # the command's result file, inside the sandbox
_rng = random.SystemRandom()


def unavailable() -> str | None:
    """Why this host cannot run sandboxed commands, or None."""
    if os.geteuid() != 0:
        return "the local sandbox needs root"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (scripts/setup-sandbox.sh)"
    return None


class CommandBox:
    """One sandboxed run's host side: the relay socket, the spec and the ``bwrap`` argv."""

    def __init__(self, folder: str, port: int) -> None:
        self.folder, self.port = folder, port
        self.uid = UID_BASE + _rng.randrange(UID_SPAN)
        self.server: asyncio.AbstractServer | None = None
        self.fds: list[int] = []  # to pass to bwrap (``pass_fds``); closed with the box

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
        except (OSError, asyncio.TimeoutError):
            writer.close()
            return

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
                if dst.can_write_eof():
                    dst.write_eof()
            except (OSError, RuntimeError):
                pass

        try:
            await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))
        finally:
            for w in (writer, up_w):
                w.close()

    def argv(
        self, command: Sequence[str], env: dict[str, str], readonly: Sequence[str], disk_mb: int
    ) -> list[str]:
        """Write the launcher's spec and return the ``bwrap`` command line that runs it."""
        spec = {
            "port": self.port,
            "uid": self.uid,
            "argv": list(command),
            "env": ENV | env,
            "result_max": RESULT_MAX,
            "rlimits": {
                "RLIMIT_NPROC": 512,
                "RLIMIT_NOFILE": 4096,
                "RLIMIT_FSIZE": disk_mb << 20,
                "RLIMIT_CORE": 0,
            },
        }
        with open(os.path.join(self.folder, "spec.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f)
        a = [shutil.which("bwrap") or "bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net"]
        a += ["--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        a += ["--hostname", "sandbox", "--cap-drop", "ALL"]
        a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        a += ["--cap-add", "CAP_NET_BIND_SERVICE"]  # a gateway on a port below 1024
        a += ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
        for name in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{name}"):
                a += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
            elif os.path.isdir(f"/{name}"):
                a += ["--ro-bind", f"/{name}", f"/{name}"]
        for etc in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives", "/etc/ssl"):
            if os.path.exists(etc):
                a += ["--ro-bind", etc, etc]
        a += ["--proc", "/proc", "--dev", "/dev"]
        for d in ("/work", "/tmp"):
            a += ["--perms", "1777", "--size", str(disk_mb << 20), "--tmpfs", d]
        binds = [*python_dirs(sys.executable), *(os.path.realpath(p) for p in readonly)]
        made = {"/", "/usr", "/etc", "/work", "/tmp", "/dev", "/proc"}
        for path in binds:
            for parent in reversed(Path(path).parents):  # traversable by the command's uid
                if str(parent) not in made and not str(parent).startswith("/usr/"):
                    a += ["--perms", "0755", "--dir", str(parent)]
                    made.add(str(parent))
            a += ["--ro-bind", path, path]
        for path in hidden_paths([*binds, "/usr"]):
            a += ["--perms", "0555", "--tmpfs", path]
        a += ["--bind", self.folder, "/run/agentrl"]
        bpf = denylist_bpf()
        if bpf is not None:
            fd = os.memfd_create("agentrl-seccomp", 0)
            os.write(fd, bpf)
            os.lseek(fd, 0, os.SEEK_SET)
            self.fds.append(fd)
            a += ["--seccomp", str(fd)]
        a += ["--clearenv", "--chdir", "/work", "--"]
        return a + [sys.executable, "-I", "-S", "-c", LAUNCHER]

    def result_bytes(self) -> bytes | None:
        """The command's result file as the launcher copied it (None: none written).
        Raises ValueError when it is over ``RESULT_MAX``."""
        path = os.path.join(self.folder, "result.json")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read(RESULT_MAX + 1)
        if len(data) > RESULT_MAX:
            raise ValueError(f"the result file is over {RESULT_MAX} bytes")
        return data


@contextlib.asynccontextmanager
async def command_box(port: int) -> AsyncIterator[CommandBox]:
    """A fresh root-only folder with the relay socket to ``127.0.0.1:port`` served on the
    running loop; both are gone on exit."""
    folder = tempfile.mkdtemp(prefix="agentrl-box-")
    os.chmod(folder, 0o700)
    box = CommandBox(folder, port)
    sock = os.path.join(folder, "gateway.sock")
    box.server = await asyncio.start_unix_server(box._relay, sock)
    os.chmod(sock, 0o600)
    try:
        yield box
    finally:
        box.server.close()
        for fd in box.fds:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
