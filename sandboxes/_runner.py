"""In-sandbox bootstrap, run as ``python -I -S -c <this source> UID MODE SITE_DIRS``.

Modes: ``zygote`` (local backend) serves runs over the unix socket whose fd is passed as UID: for each it forks
a child as pid 1 of a fresh pid namespace; it enters fresh mount and ipc namespaces, mounts
new tmpfs dirs and forks the program, which drops every capability and its uid, then runs it.
The zygote itself never runs untrusted code, so each fork starts from a pristine process.
``once`` (docker) and ``session`` (interpreter) run directly in the sandbox they start in.

Stdlib only, and only cheap modules at start-up (frames are ``marshal``-ed, not JSON). ``-S`` skips ``site`` (its ``.pth`` processing dominates start-up); SITE_DIRS
(``:``-joined) are appended to ``sys.path`` instead, so installed packages stay importable.

It drops to the unprivileged ``UID`` first (``-`` when the engine already did), then reads a
length-prefixed marshal frame from fd 0: limits, env, files and stdin. ``once`` mode then runs the
program (Python in-process, bash via exec); ``session`` mode keeps one namespace and runs
framed cells, ending each cell's output with ``MARK token:status``. The host does every kill.
"""

import gc
import marshal
import os
import resource
import sys

MARK = b"\x1e"
WORK = "/work"
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
_LIBC: list = []


def _drop(uid: str) -> None:
    if uid != "-":
        os.setgroups([])
        os.setgid(int(uid))
        os.setuid(int(uid))
        if os.getuid() == 0 or os.geteuid() == 0:
            os._exit(125)


def _read_frame(fd: int) -> dict | None:
    head = b""
    while not head.endswith(b"\n"):
        ch = os.read(fd, 1)
        if not ch:
            return None
        head += ch
    need, chunks = int(head), []
    while need:
        chunk = os.read(fd, min(need, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        need -= len(chunk)
    return marshal.loads(b"".join(chunks))


def _limit(kind: int, value: int | None) -> None:
    if value is None:
        return
    soft, hard = resource.getrlimit(kind)
    cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (cap, cap))


def _setup(req: dict) -> None:
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
    os.chdir(WORK)
    for name, content in req.get("files", {}).items():
        path = os.path.join(WORK, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
    os.environ.clear()
    os.environ.update(req["env"])
    fd = os.open("/tmp", os.O_RDWR | os.O_TMPFILE, 0o600)
    os.write(fd, req.get("stdin", "").encode())
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)
    if req.get("seccomp"):
        _install_seccomp(req["seccomp"])


def _install_seccomp(bpf: bytes) -> None:
    """Load the host-compiled filter (``_seccomp.py``); it holds for this process, its
    children and across execve. no_new_privs (already set by bwrap) lets an unprivileged
    process install it."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(bpf, len(bpf))
    prog = SockFprog(len(bpf) // 8, ctypes.addressof(buf))
    _libc_call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _libc_call("prctl", PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0)


def _report(exc: BaseException) -> None:
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _once(req: dict) -> None:
    path = os.path.join(WORK, "main.py" if req["language"] == "python" else "main.sh")
    with open(path, "w") as f:
        f.write(req["code"])
    if req["language"] == "bash":
        os.execve("/bin/bash", ["bash", path], dict(os.environ))
    sys.argv = [path]
    sys.path.insert(0, WORK)
    scope = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(compile(req["code"], path, "exec"), scope)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - report like the interpreter would
        _report(exc)
        sys.exit(1)


def _cell(code: str, scope: dict) -> str:
    import ast

    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
            exec(compile(tree, "<cell>", "exec"), scope)
            value = eval(compile(ast.Expression(last.value), "<cell>", "eval"), scope)
            if value is not None:
                print(repr(value))
        else:
            exec(compile(tree, "<cell>", "exec"), scope)
        return "ok"
    except SystemExit:
        return "exit"
    except BaseException as exc:  # noqa: BLE001 - the cell failed, the session lives on
        _report(exc)
        return "error"


def _session(ctrl: int) -> None:
    sys.path.insert(0, WORK)
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        msg = _read_frame(ctrl)
        if msg is None:
            return
        status = _cell(msg["code"], scope)
        sys.stdout.flush()
        sys.stderr.flush()
        tail = MARK + f"{msg['token']}:{status}\n".encode()
        os.write(1, tail)
        os.write(2, tail)


def _libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def _libc_call(name: str, *args: object) -> None:
    if getattr(_libc(), name)(*args) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _child(req: dict, out: int, err: int) -> None:
    """The program process (pid 2 of its namespace): drop everything, then run the code."""
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.closerange(3, 1 << 16)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    for cap in range(last_cap + 1):
        _libc_call("prctl", PR_CAPBSET_DROP, cap, 0, 0, 0)
    _drop(str(req["uid"]))
    _setup(req)
    _once(req)


def _init(req: dict, out: int, err: int, report: int) -> None:
    """Pid 1 of the run's pid namespace: private namespaces, fork the program, reap, report.

    The program must not be pid 1 itself: the kernel drops default-action signals (SIGXCPU,
    kill(1, ...)) sent to a namespace init. When this exits, the kernel kills the namespace.
    """
    try:
        _fresh_namespaces(req)
        _libc_call("mount", b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
        pid = os.fork()
    except BaseException as exc:  # noqa: BLE001 - tell the host rather than dying silently
        os.write(report, marshal.dumps({"error": repr(exc)}))
        os._exit(0)
    if pid == 0:
        _finish(req, out, err)
    os.close(out)
    os.close(err)
    while True:
        done, status = os.wait()
        if done == pid:
            break
    os.write(report, marshal.dumps({"wait": status}))
    os._exit(0)


def _finish(req: dict, out: int, err: int) -> None:
    """Run the program in this process, then exit like the interpreter would."""
    code = 0
    try:
        _child(req, out, err)
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        import atexit

        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (exc.code is not None)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - setup failed inside the sandbox
        os.write(2, f"sandbox setup failed: {exc!r}\n".encode())
        code = 125
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken stream must not hang exit
            pass
    os._exit(int(code) & 0xFF)


def _fresh_namespaces(req: dict) -> None:
    """New mount + ipc namespaces with empty size-capped tmpfs work dirs.

    Net and uts stay the zygote's (already private: loopback only, fixed hostname): a zygote
    serves one run at a time and nothing of a run survives it, so there is nothing to share;
    SysV/POSIX IPC objects do outlive their creators, hence the per-run ipc namespace.
    """
    _libc_call("unshare", CLONE_NEWNS | CLONE_NEWIPC)
    _libc_call("mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    opts = f"size={req['disk_bytes']},mode=1777".encode()
    for d in (b"/work", b"/tmp", b"/dev/shm"):
        _libc_call("mount", b"tmpfs", d, b"tmpfs", MS_NOSUID | MS_NODEV, opts)


def _fork_in_new_pidns(own_pidns: int) -> int:
    """fork() whose child is pid 1 of a new pid namespace; the zygote itself stays put.

    ``unshare(CLONE_NEWPID)`` only retargets future children and may not be repeated until
    ``setns`` back to our own namespace resets that, which is cheaper than an extra fork.
    """
    _libc_call("setns", own_pidns, CLONE_NEWPID)
    _libc_call("unshare", CLONE_NEWPID)
    return os.fork()


def _zygote(ctrl_fd: int) -> None:
    """Serve runs one at a time: recv (frame, stdout fd, stderr fd), fork, reply a frame."""
    import socket
    import traceback  # noqa: F401 - preloaded so each fork need not import it (errors are common)

    _libc()
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    gc.freeze()  # forks then share these pages instead of copying them on the first GC
    ctrl = socket.socket(fileno=ctrl_fd)
    while True:
        head, fds, _, _ = socket.recv_fds(ctrl, 32, 2)
        if not head:
            return
        while not head.endswith(b"\n"):
            head += ctrl.recv(1)
        n, body = int(head), b""
        while len(body) < n:
            body += ctrl.recv(n - len(body))
        req = marshal.loads(body)
        rfd, wfd = os.pipe()
        pid = _fork_in_new_pidns(own_pidns)
        if pid == 0:
            ctrl.close()
            os.close(rfd)
            os.close(own_pidns)
            gc.disable()
            _init(req, fds[0], fds[1], wfd)
        for fd in (*fds, wfd):
            os.close(fd)
        os.waitpid(pid, 0)
        reply = os.read(rfd, 4096) or marshal.dumps({"error": "zygote child died"})
        os.close(rfd)
        ctrl.sendall(str(len(reply)).encode() + b"\n" + reply)


def main() -> None:
    uid, mode, site_dirs = sys.argv[1:4]
    sys.path += [d for d in site_dirs.split(":") if d]
    del sys.argv[1:]
    if mode == "zygote":
        _zygote(int(uid))
        return
    _drop(uid)
    req = _read_frame(0)
    if req is None:
        os._exit(0)
    ctrl = os.dup(0) if mode == "session" else -1
    _setup(req)
    if mode == "session":
        _session(ctrl)
    else:
        _once(req)


main()
