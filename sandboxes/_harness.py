"""In-sandbox program side: set the process up, run the code as ``__main__``.

The program runs in its own real ``__main__`` module (so its functions and classes pickle and
``multiprocessing`` works). A run with tests (``ExecRequest.check``) is a different shape: the
tests run in a judge process the program never touches, and the program in a process the
judge forked before it read the tests (``_judge.py``); only the judge writes the verdict (MARK + the run's secret nonce)
to fd 3, a pipe read by the trusted parent (init), which reports it to the host. The harness
uses private references to the functions it needs, taken before any untrusted code runs.

This file has no imports of its own package: ``local.RUNNER`` prepends it (then ``_wire.py`` and
``_judge.py``) to ``_runner.py`` and the result runs as ``python -I -S -c``. Stdlib only, cheap modules only.
"""

import builtins
import marshal
import os
import resource
import sys

MARK = b"\x1e"
WORK = "/work"
VERDICT_FD = 3
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 24, 38, 22, 2
PR_SET_DUMPABLE = 4
# Private references: the candidate may replace the public ones (os._exit = ..., sys.exit = ...).
_exit, _write, _dup2, _exec, _compile = os._exit, os.write, os.dup2, exec, compile
_BaseException, _SystemExit, _isinstance = BaseException, SystemExit, isinstance
_LIBC: list = []
# The environment this interpreter started with, taken by the zygote (whose sandbox starts
# with the backend's base environment): a run asking for exactly it keeps it, since
# rebuilding ``os.environ`` (``clear`` + ``update``, Python-level mapping code) touched
# ~80 pages of the forked heap, ~0.35 ms of copy-on-write faults per run.
_START_ENV: list = []
_FD_SCAN = 1 << 16  # ``_close_all_but`` closes below this by range, lists /proc for the rest


def _drop(uid: str) -> None:
    if uid != "-":
        os.setgroups([])
        os.setgid(int(uid))
        os.setuid(int(uid))
        if os.getuid() == 0 or os.geteuid() == 0:
            _exit(125)


def _close_all_but(keep: set[int]) -> None:
    """Close every fd not in ``keep``, whatever its number. ``pass_fds`` keeps the host's
    numbers (a host holding 280 fds gave the zygote's control socket fd 281): one holding
    65536 under a hard RLIMIT_NOFILE above that (docker's default is 2**20) gives numbers
    past any fixed bound, so past ``_FD_SCAN`` the open ones are listed and closed."""
    low = 0
    for fd in (*sorted(keep), _FD_SCAN):
        if fd > low:
            os.closerange(low, fd)
        low = max(low, fd + 1)
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] <= _FD_SCAN:
        return  # no fd is past it: the host's came under it, ours are closed before it drops
    for name in os.listdir("/proc/self/fd"):
        if int(name) >= _FD_SCAN and int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:  # the listing's own fd
                pass


def _read_exact(fd: int, n: int) -> bytearray | None:
    """Read exactly ``n`` bytes in linear time (one buffer, no re-concatenation)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            return None
        got += k
    view.release()
    return buf


def _read_frame(fd: int, head: bytes = b"") -> dict | None:
    """A ``len\\n`` + marshal frame (``head``: bytes of the length line already read)."""
    while not head.endswith(b"\n"):
        ch = os.read(fd, 1)
        if not ch:
            return None
        head += ch
    body = _read_exact(fd, int(head))
    return None if body is None else marshal.loads(body)


def _limit(kind: int, value: int | None) -> None:
    if value is None:
        return
    soft, hard = resource.getrlimit(kind)
    cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (cap, cap))


def _setup(req: dict) -> None:
    """Work files, environment, stdin (a memfd: no tmpfs space used), limits and seccomp.

    Files and stdin are the request's own data, written before the rlimits (stdin may be
    larger than the file-size limit); the tmpfs size and the memory cgroup still bound them.
    """
    os.chdir(WORK)
    for name, content in req.pop("files", {}).items():
        path = os.path.join(WORK, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    env = req["env"]
    if not _START_ENV or env != _START_ENV[0]:  # two plain dicts: compared in C
        os.environ.clear()
        os.environ.update(env)
    fd = os.memfd_create("stdin", 0)
    data = req.pop("stdin", b"")
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.write(fd, view[done:])
    view.release()
    del data
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)
    lim = req["limits"]
    if lim.get("cpu_s"):
        cpu = max(1, -int(-lim["cpu_s"] // 1))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _limit(resource.RLIMIT_DATA, lim.get("data"))
    _limit(resource.RLIMIT_AS, lim.get("as"))
    _limit(resource.RLIMIT_FSIZE, lim.get("fsize"))
    _limit(resource.RLIMIT_NOFILE, lim.get("nofile"))
    _limit(resource.RLIMIT_NPROC, lim.get("nproc"))
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_MEMLOCK, 0)
    if req.get("seccomp"):
        _install_seccomp(req["seccomp"])


def _install_seccomp(bpf: bytes) -> None:
    """Load the host-compiled filter (``_seccomp.py``); it holds for this process, its
    children and across execve. no_new_privs lets an unprivileged process install it."""
    import ctypes
    import struct

    # struct sock_fprog {unsigned short len; struct sock_filter *filter;}, packed with native
    # alignment, pointing at ``bpf``'s own buffer (alive through the call); passed as bytes.
    # No ctypes types: a Structure subclass cost ~0.25 ms to define in every run, and each
    # create_string_buffer of a new length ~0.07 ms (one array type per length).
    addr = ctypes.cast(ctypes.c_char_p(bpf), ctypes.c_void_p).value
    prog = struct.pack("@HP", len(bpf) // 8, addr)
    _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc_call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0)


def _libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _libc_call(name: str, *args: object) -> None:
    if getattr(_libc(), name)(*args) != 0:
        raise libc_error(name)


def libc_error(name: str) -> OSError:
    """The OSError of the libc call `name` that just failed (its errno)."""
    import ctypes

    err = ctypes.get_errno()
    return OSError(err, f"{name}: {os.strerror(err)}")


def _drop_caps() -> None:
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    for cap in range(last_cap + 1):
        _libc_call("prctl", PR_CAPBSET_DROP, cap, 0, 0, 0)


def _report(exc: BaseException) -> None:
    """Print a traceback like the interpreter would, without the runner's own frames."""
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _main_module(path: str):
    """A fresh, real ``__main__`` module (pickle looks functions up in ``sys.modules``)."""
    mod = type(sys)("__main__")
    # typeshed's ModuleType has no __builtins__ attribute; a module's namespace does.
    mod.__file__, mod.__builtins__, mod.__spec__, mod.__loader__ = path, builtins, None, None  # type: ignore[attr-defined]
    sys.modules["__main__"] = mod
    return mod


def _fail(msg: str) -> int:
    try:
        sys.stderr.flush()
    except _BaseException:  # noqa: BLE001 - the candidate may have broken stderr
        pass
    _write(2, f"\n{msg}\n".encode())
    return 1


def _run_program(
    req: dict,
    *,
    _exec=_exec,
    _compile=_compile,
    _SystemExit=_SystemExit,
    _BaseException=_BaseException,
) -> int:
    """Run the program (no tests: ``_judge._run_tests`` runs those); returns the exit code
    the run should have. The private references are bound as defaults too: a program that
    replaces this module's globals through its caller's frame does not change this call."""
    python = req["language"] == "python"
    path = os.path.join(WORK, "main.py" if python else "main.sh")
    with open(path, "w") as f:
        f.write(req["code"])
    if not python:
        os.execve("/bin/bash", ["bash", path], dict(os.environ))
    sys.argv = [path]
    sys.path.insert(0, WORK)
    scope = _main_module(path).__dict__
    try:
        _exec(_compile(req.pop("code"), path, "exec"), scope)
    except _SystemExit:
        raise
    except _BaseException as exc:  # noqa: BLE001 - report like the interpreter would
        _report(exc)
        return 1
    return 0


def _finish(body, then=None) -> None:
    """Run ``body()`` (the program) in this process, then exit like the interpreter would
    (``then(code)`` first, if given: the init that judged reports before it exits)."""
    code = 0
    try:
        code = body()
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
    except _SystemExit as exc:
        # `_isinstance` (isinstance, bound before user code runs) narrows as isinstance does;
        # mypy does not know the alias.
        code = exc.code if _isinstance(exc.code, int) else (exc.code is not None)  # type: ignore[assignment]
        if not _isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except _BaseException as exc:  # noqa: BLE001 - setup failed inside the sandbox
        _write(2, f"sandbox setup failed: {exc!r}\n".encode())
        code = 125
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except _BaseException:  # noqa: BLE001 - a closed or broken stream must not hang exit
            pass
    if then is not None:
        then(int(code) & 0xFF)
    _exit(int(code) & 0xFF)


def _cell(code: str, scope: dict) -> str:
    import ast

    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = tree.body[-1] if tree.body else None
        if _isinstance(last, ast.Expr):
            tree.body.pop()
            _exec(_compile(tree, "<cell>", "exec"), scope)
            value = eval(_compile(ast.Expression(last.value), "<cell>", "eval"), scope)  # type: ignore[union-attr]  # narrowed by _isinstance
            if value is not None:
                print(repr(value))
        else:
            _exec(_compile(tree, "<cell>", "exec"), scope)
        return "ok"
    except _SystemExit:
        return "exit"
    except _BaseException as exc:  # noqa: BLE001 - the cell failed, the session lives on
        _report(exc)
        return "error"


def _cells(cmd: int, rep: int) -> None:
    """Session worker: run cells read from ``cmd`` in one ``__main__``; report each status on
    ``rep``. It never sees the host's frames, so it cannot learn the end-of-cell tokens."""
    sys.path.insert(0, WORK)
    scope = _main_module(os.path.join(WORK, "<session>")).__dict__
    while True:
        msg = _read_frame(cmd)
        if msg is None:
            _exit(0)
        status = _cell(msg["code"], scope)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except _BaseException:  # noqa: BLE001
                pass
        _write(rep, status.encode() + b"\n")
