"""``local`` backend (default): bubblewrap namespaces + cgroups + rlimits + unprivileged uids.

How a run is isolated. A *zygote* (our own runner, ``_runner.py``) is started by ``bwrap`` as
root without a user namespace, in new mount/pid/net/ipc/uts/cgroup namespaces whose root is an
empty tmpfs holding only read-only binds of ``/usr`` (+ ``/bin``/``/lib`` links), the
interpreter prefix and ``ld.so.cache``; a private ``/proc`` and a minimal ``/dev``. It sits in
its own cgroup (memory incl. swap and tmpfs, pids, CPU quota) set by the host before each run.
For every run the zygote forks, before the request arrives, pid 1 of a *fresh* pid namespace
(the run's init), which enters fresh mount and ipc namespaces, mounts new size-capped tmpfs
``/work`` (cwd), ``/tmp``, ``/dev/shm`` (interpreter dirs under them re-bound read-only) and a
new ``/proc``, then switches to a random unused host uid (never root; the capability bounding
set is empty: the zygote emptied it once, every fork inherits it; ``no_new_privs`` from bwrap)
and becomes non-dumpable. Only then does that unprivileged process receive the request
itself. It forks the program process, which applies rlimits (CPU, data, address space, file
size, open files, processes), installs a clean environment and runs the code (Python
in-process from the warm interpreter as a real ``__main__``; bash via exec); a run with tests
has no separate program process: the init takes those limits and is the judge itself
(``_judge.py``), which forks the candidate's process. When the init exits, the kernel kills
everything left in its pid namespace (setsid/double-forked daemons included). The host streams stdout/stderr with a hard cap and, on timeout or flood, SIGKILLs
the zygote's process group and every member of its cgroup, then discards that zygote.
Zygotes never run untrusted code and never read a request, so reusing them (the warm pool)
leaks no state and no bytes of earlier runs. bwrap rather than raw unshare:
audited, ~8 ms, ``--die-with-parent``. No user namespace: as root it would map the sandbox to
host uid 0, whereas a real unprivileged uid keeps file-permission checks and RLIMIT_NPROC real.

Threat model.
Covered: reading host files outside the read-only system/interpreter binds (home, /root, /etc,
secrets in temp dirs), host env vars, all networking (the zygote's private netns has only a
loopback, used by one run at a time; the host's 127.0.0.1 is unreachable), seeing or signalling host processes or other runs, writes outside the private
tmpfs, fork/memory/disk bombs, CPU burners, output floods, processes outliving the run, state
leaking between runs.
Kernel attack surface: a seccomp denylist (``_seccomp.py``) is installed right before the code
runs: no new namespaces, mounts, io_uring, eBPF, perf events, userfaultfd, keyring, ptrace,
kcmp, modify_ldt, landlock, AF_VSOCK sockets.
Not covered: kernel exploits through the syscalls that stay allowed (the zygote holds
CAP_SYS_ADMIN inside its namespaces to build per-run ones, the code never does), CPU side channels, reading world-readable files
under ``/usr`` and the interpreter prefix (installed packages, except the install folders of
``base.TASK_DATA_PACKAGES``, which are masked), I/O and CPU contention
between concurrent runs. Without a writable cgroup hierarchy, memory/pids/CPU fall back to
rlimits, which bound each process rather than the whole run. Requires root and bubblewrap.
"""

from __future__ import annotations

import atexit
import marshal
import os
import random
import shutil
import site
import subprocess
import sys
from pathlib import Path

from . import _cgroup, _io
from ._compiled import built
from ._pool import Pool
from ._seccomp import denylist_bpf
from ._zygote import SandboxProcess, Zygote
from .base import ExecRequest, ExecResult, SandboxBackend, check_knobs, hidden_paths

_HERE = Path(__file__).parent
RUNNER = "\n".join(
    (_HERE / f).read_text() for f in ("_harness.py", "_wire.py", "_judge.py", "_runner.py")
)
# A zygote of the host's own interpreter gets the runner compiled, as the first frame on its
# control socket, instead of as ``-c`` source: compiling 50 KB in the zygote left ~1.5 MB
# more of its heap resident, which every run's two forks copy (page tables) and tear down.
RUNNER_CODE = marshal.dumps(compile(RUNNER, "<string>", "exec"))
BOOT = (
    "import marshal, os, sys\n"
    "def _boot(fd):\n"
    "    head = b''\n"
    "    while not head.endswith(b'\\n'):\n"
    "        ch = os.read(fd, 1)\n"
    "        if not ch:\n"
    "            os._exit(3)\n"
    "        head += ch\n"
    "    body, n = bytearray(), int(head)\n"
    "    while len(body) < n:\n"
    "        chunk = os.read(fd, n - len(body))\n"
    "        if not chunk:\n"
    "            os._exit(3)\n"
    "        body += chunk\n"
    "    return marshal.loads(body)\n"
    "exec(_boot(int(sys.argv[1].split(':', 1)[0])))\n"
)
TMPFS = ("/work", "/tmp", "/dev/shm")  # fresh per run; interpreter dirs below them are re-bound
UID_BASE, UID_SPAN = 2_000_000_000, 10**8  # runs get random uids in [BASE, BASE + SPAN)
ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/work",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "USER": "sandbox",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
}
# Imported once per zygote, so runs need not (HumanEval/MBPP solutions mostly use these).
PRELOAD = (
    "typing",
    "math",
    "random",
    "copy",
    "string",
    "heapq",
    "bisect",
    "itertools",
    "functools",
    "collections",
    "re",
)
_rng = random.SystemRandom()


def new_uid() -> int:
    """A random host uid no account uses; unique per run so RLIMIT_NPROC is per run."""
    return UID_BASE + _rng.randrange(UID_SPAN)


class LocalBackend(SandboxBackend):
    """Isolated local execution with a pool of warm zygotes (``pool_size`` started eagerly)."""

    name = "local"

    def __init__(
        self,
        pool_size: int = 0,
        max_idle: int = 8,
        pids: int = 64,
        cpus: float = 1.0,
        disk_mb: int = 64,
        python: str = sys.executable,
        ro_binds: tuple[str, ...] = (),
        preload: tuple[str, ...] = PRELOAD,
    ) -> None:
        check_knobs(
            {"pool_size": pool_size, "max_idle": max_idle},
            {"pids": pids, "cpus": cpus, "disk_mb": disk_mb},
        )
        for path in ro_binds:
            if not (os.path.isabs(path) and os.path.exists(path)):
                raise ValueError(f"ro_binds: {path!r} is not an existing absolute path")
        bwrap = shutil.which("bwrap")
        if bwrap is None or os.geteuid() != 0:
            raise RuntimeError("local sandbox needs root and bubblewrap (scripts/setup-sandbox.sh)")
        self.bwrap: str = bwrap
        self.pids, self.cpus, self.disk_mb, self.python = pids, cpus, disk_mb, python
        # The judge takes the tests compiled by this process (marshal: same interpreter only).
        self.own_python = os.path.realpath(python) == os.path.realpath(sys.executable)
        self.preload = tuple(preload)
        self.ro_binds = (*python_dirs(python), *ro_binds)
        self.site_dirs = site_dirs(python)
        under = [p for p in self.ro_binds if any(p.startswith(d + "/") for d in TMPFS)]
        self.keep = ":".join(under)
        self.cgroup_version = _cgroup.detect()
        if self.cgroup_version:
            _cgroup.reap_stale()
        self.pool: Pool[Zygote] = Pool(self._spawn, Zygote.close, max_idle, pool_size)
        atexit.register(self.pool.close)

    def argv(
        self, arg: int | str, mode: str, caps: tuple[str, ...] = (), runner: str = RUNNER
    ) -> list[str]:
        """The bwrap command line for one sandbox (see the module docstring)."""
        size = str(self.disk_mb << 20)
        a = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts"]
        a += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        a += ["--cap-drop", "ALL"]
        for cap in ("CAP_SETUID", "CAP_SETGID", *caps):
            a += ["--cap-add", cap]
        a += ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{name}"):
                a += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
            elif os.path.isdir(f"/{name}"):
                a += ["--ro-bind", f"/{name}", f"/{name}"]
        for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
            if os.path.exists(f):
                a += ["--ro-bind", f, f]
        a += ["--proc", "/proc", "--dev", "/dev"]
        for d in TMPFS:
            a += ["--perms", "1777", "--size", size, "--tmpfs", d]
        # Interpreter binds go after the tmpfs mounts: a venv under /tmp must not be hidden.
        made: set[str] = {"/", "/usr", "/etc", "/work", "/tmp", "/dev", "/dev/shm", "/proc"}
        for path in self.ro_binds:
            for parent in reversed(Path(path).parents):
                if str(parent) not in made and not str(parent).startswith("/usr/"):
                    a += ["--perms", "0755", "--dir", str(parent)]
                    made.add(str(parent))
            a += ["--ro-bind", path, path]
        for path in hidden_paths([*self.ro_binds, "/usr"]):
            a += ["--perms", "0555", "--tmpfs", path]
        a += ["--clearenv", "--chdir", "/work"]
        for key, value in ENV.items():  # runs asking for exactly this keep it (``_setup``)
            a += ["--setenv", key, value]
        if mode == "zygote":  # the zygote unsets it once started: runs never see it
            a += ["--setenv", "LD_BIND_NOW", "1"]
        a += ["--"]
        return a + [self.python, "-I", "-S", "-c", runner, str(arg), mode, self.site_dirs]

    def _spawn(self) -> Zygote:
        caps = ("CAP_SYS_ADMIN", "CAP_SETPCAP")
        mods = ",".join(self.preload)
        arg = f"{{}}:{self.disk_mb << 20}:{UID_BASE}:{UID_SPAN}:{mods}:{self.keep}"
        runner, code = (BOOT, RUNNER_CODE) if self.own_python else (RUNNER, None)
        return Zygote(
            lambda fd: self.argv(arg.format(fd), "zygote", caps, runner), self.cgroup_version, code
        )

    def limits(self, req: ExecRequest | None, cpu: bool = True) -> dict:
        return _io.rlimits(req, self.pids, self.disk_mb << 20, cpu)

    def run(self, request: ExecRequest) -> ExecResult:
        body = _io.payload(request, ENV, self.limits(request))
        body["seccomp"] = denylist_bpf()
        if request.check is not None and self.own_python:
            body["built"] = built(request.check, request.support)
        # Idle zygotes may have died (each pooled one at most once: they need not count as
        # tries); a run that fails on a live one is tried once more on a fresh one.
        tries, dead = 2, self.pool.max_idle
        while tries > 0:
            try:
                zygote = self.pool.get()
            except OSError as exc:
                return ExecResult("sandbox_error", stderr=f"cannot start sandbox: {exc}")
            if zygote.box.proc.poll() is not None:
                zygote.close()
                dead -= 1
                if dead < 0:  # more dead ones than the pool can hold: the starts are failing
                    tries -= 1
                continue
            try:
                res = zygote.run(request, body, self.pids, self.cpus)
            except OSError as exc:
                zygote.close()
                tries -= 1
                if tries > 0:
                    continue
                return ExecResult("sandbox_error", stderr=f"sandbox failed: {exc}")
            except BaseException:  # a bug or an interrupt: never leave a sandbox behind
                zygote.close()
                raise
            if zygote.alive:
                self.pool.put(zygote)
            return res
        return ExecResult("sandbox_error", stderr="sandbox failed twice to start")

    def start(self, mode: str) -> SandboxProcess:
        """A one-off sandbox whose runner (``session``/``once``) reads frames on stdin."""
        return SandboxProcess(self.argv(new_uid(), mode), self.cgroup_version)

    def close(self) -> None:
        self.pool.close()


def site_dirs(python: str) -> str:
    """``:``-joined site-packages of ``python`` (the runner runs with ``-S``)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable) and python == sys.executable:
        return ":".join(site.getsitepackages())
    code = "import site, sys; sys.stdout.write(':'.join(site.getsitepackages()))"
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"cannot run the sandbox interpreter {python}: {out.stderr.strip()}")
    return out.stdout


def python_dirs(python: str) -> list[str]:
    """Interpreter prefixes to expose read-only (base install and venv, if any)."""
    dirs = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}
    dirs.add(str(Path(os.path.realpath(python)).parent.parent))
    dirs.add(os.path.abspath(os.path.join(os.path.dirname(python), "..")))  # a venv's own dir
    return sorted(d for d in dirs if not (d == "/usr" or d.startswith("/usr/")))
