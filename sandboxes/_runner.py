"""In-sandbox process roles, run as ``python -I -S -c <_harness.py + this> ARG MODE SITE_DIRS``.

``zygote`` (local backend; ARG ``ctrl_fd:disk_bytes:uid_base:uid_span:preload,...:keep...``): a warm
interpreter that forks, *before* any request arrives, pid 1 of a fresh pid namespace (the
run's *init*) and waits for it. The init enters fresh mount and ipc namespaces, mounts new
tmpfs dirs (re-binding interpreter dirs that live under them, e.g. a venv in ``/tmp``) and a
new ``/proc`` as root, then switches to a random unprivileged uid (no capability left; the
zygote emptied the bounding set) and makes itself non-dumpable, all while waiting. Only then
does it receive the request itself: the zygote never holds request bytes and every init is a
fresh fork of it, so no run can find an earlier run's code, tests, stdin, env or files in its
memory. A plain run: the init forks the program, reaps it and replies to the host: wait
status, CPU time, the harness verdict (fd 3, ``_harness.py``) and whether the disk was full.
A run with tests: the init is the judge (``_judge_here``) and replies the same way itself.
As pid 1 it gets from inside its namespace only the signals it handles (none).

``once`` (docker; ARG ``-``): the same init/program split inside the container. The init is
non-dumpable before it forks the program (same uid: otherwise the program could open its
memory). The report goes to stderr after a token the host sends *after* the request, when the
program has already been forked (and has dropped the stream), so the program never knows it;
the host takes only a single report that is the last line of stderr (``docker_backend``).

``session`` (interpreter; ARG the uid): a trusted parent relays cells to a worker child and
writes each cell's end-of-output marker; the worker never sees the marker's token.

``-S`` skips ``site`` (its ``.pth`` processing dominates start-up); SITE_DIRS (``:``-joined)
are appended to ``sys.path`` instead, so installed packages stay importable.
"""

import _signal  # type: ignore[import-not-found]  # the C module behind ``signal``; no stub
import _socket
import gc
import marshal
import os
import sys

try:  # inside the sandbox the harness source is prepended instead (``local.RUNNER``)
    from ._harness import (
        _START_ENV,
        MARK,
        PR_SET_DUMPABLE,
        VERDICT_FD,
        _cells,
        _close_all_but,
        _drop,
        _drop_caps,
        _exit,
        _finish,
        _libc,
        _libc_call,
        _read_frame,
        _run_program,
        _setup,
        libc_error,
    )
    from ._judge import SECRETS_FD, _run_tests
    from ._wire import _json, _send
except ImportError:
    pass

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 1 << 14, 1 << 18
MS_RDONLY, MS_REMOUNT = 1, 32
EXIT_HANGUP = 3  # the init's exit code when the host closed the control socket
TMPFS = ("/work", "/tmp", "/dev/shm")


def _program(
    req: dict, out: int, err: int, verdict: int, uid: str, caps: bool, secrets: int = -1
) -> None:
    """The program process: stdout/stderr/verdict on fds 1-3, for a run with tests the
    channel its tests arrive on at fd 4 (``_judge.SECRETS_FD``), nothing else open."""
    if secrets >= 0:
        secrets = os.dup2(secrets, 250)  # above 1-4, which the dups below take
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(verdict, VERDICT_FD)
    if secrets >= 0:
        os.dup2(secrets, SECRETS_FD)
    _close_all_but({0, 1, 2, VERDICT_FD, *([SECRETS_FD] if secrets >= 0 else [])})
    gc.enable()  # the zygote and init run without it; user code gets normal Python

    def body() -> int:
        if caps:
            _drop_caps()
        _drop(uid)
        _setup(req)
        return _run_tests(req) if req.get("tests") else _run_program(req)

    _finish(body)


def _fork_program(
    req: dict, out: int, err: int, uid: str, caps: bool, secrets: int = -1
) -> tuple[int, int]:
    """Fork the program; returns its pid and the read end of its verdict pipe."""
    vr, vw = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(vr)
        _libc_call("prctl", PR_SET_DUMPABLE, 1, 0, 0, 0)  # our own mm: the init's stays closed
        _program(req, out, err, vw, uid, caps, secrets)
    req.clear()
    os.close(vw)
    for fd in (out, err):
        if fd > 2:
            os.close(fd)
    return pid, vr


def _answer(ctrl_fd: int, done: int, took: int, reply: dict) -> None:
    """The run's one reply to the host. ``A`` on ``took`` first: from then on the zygote never
    answers for this init (were it killed before the reply left, a second frame would be read
    as the next run's reply). ``R`` on ``done`` after it: the zygote forks the next run's init
    only then (sooner, that fork competed with this reply for the run's CPU). A plain
    ``write`` on the socket: a throwaway socket object warned, unclosed, when collected."""
    data = marshal.dumps(reply)
    os.write(took, b"A")
    view, sent = memoryview(str(len(data)).encode() + b"\n" + data), 0
    while sent < len(view):
        sent += os.write(ctrl_fd, view[sent:])
    os.write(done, b"R")


def _judge_here(req: dict, fds: list[int], ctrl_fd: int, done: int, took: int) -> None:
    """A run with tests: the init itself is the judge (``_judge.py``), one process fewer than
    a judge forked beside it. It is already the run's uid and non-dumpable; it takes the
    program's limits and seccomp filter, forks the player (which closes every fd but its
    own: the init's channels too), reads the tests from fd 4 (the control socket), runs them
    and reports how they ended, the verdict included. Its own fds 1-4 are the run's, like a
    program's."""
    vr, vw = os.pipe()
    high = [os.dup2(fd, 240 + i) for i, fd in enumerate((ctrl_fd, done, took, vr, vw, *fds))]
    reply_fd, done_fd, took_fd, verdict_r, verdict_w, out, err = high
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(verdict_w, VERDICT_FD)
    os.dup2(reply_fd, SECRETS_FD)
    # Every fd but these: the zygote's own control socket (whatever number the host gave
    # it) included, not only those below the copies (a host holding 250 fds made it 281).
    _close_all_but({0, 1, 2, VERDICT_FD, SECRETS_FD, reply_fd, done_fd, took_fd, verdict_r})
    gc.enable()  # the zygote and init run without it; the tests get normal Python

    def body() -> int:
        _setup(req)
        return _run_tests(req)

    def report(code: int) -> None:
        import resource

        verdict = _read_verdict(verdict_r)
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
        full = any(_full(d) for d in TMPFS)
        for fd in (1, 2):  # (flushed) the host reads them to EOF first: not after our teardown
            os.close(fd)
        reply = {"wait": code << 8, "cpu": cpu, "verdict": verdict, "full": full}
        _answer(reply_fd, done_fd, took_fd, reply)
        _exit(0)  # the code went in the reply; EXIT_HANGUP would stop the zygote

    _finish(body, report)


def _read_verdict(fd: int) -> bytes:
    """What the judge wrote on the verdict pipe, without waiting (empty: no verdict)."""
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""


def _reap(pid: int, vr: int) -> dict:
    """Wait for the program (reaping orphans too) and describe how it ended."""
    while True:
        done, status = os.wait()
        if done == pid:
            break
    verdict = _read_verdict(vr)
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    full = any(_full(d) for d in TMPFS)
    return {"wait": status, "cpu": use.ru_utime + use.ru_stime, "verdict": verdict, "full": full}


def _recv_fds(sock, size: int, most: int) -> tuple[bytes, list[int]]:
    """``socket.recv_fds`` on the C socket object: the ``socket`` module (its classes, enums
    and ``array``) is neither imported by the zygote nor touched by each init."""
    data, anc, _, _ = sock.recvmsg(size, _socket.CMSG_SPACE(most * 4))
    fds = []
    for level, kind, raw in anc:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds += [
                int.from_bytes(raw[i : i + 4], sys.byteorder) for i in range(0, len(raw) - 3, 4)
            ]
    return data, fds


def _full(d: str) -> bool:
    try:
        return os.statvfs(d).f_bavail == 0
    except OSError:
        return False


def _fresh_namespaces(disk_bytes: int, keep: list[str]) -> None:
    """New mount + ipc namespaces with empty size-capped tmpfs work dirs.

    Interpreter dirs under a tmpfs mount point (``keep``; a venv in ``/tmp``) are opened first
    and bound again, read-only, inside the new tmpfs. Net and uts stay the zygote's (private:
    loopback only, fixed hostname); SysV/POSIX IPC objects outlive their creators, hence ipc.
    """
    _libc_call("unshare", CLONE_NEWNS | CLONE_NEWIPC)
    _libc_call("mount", b"none", b"/", None, MS_REC | MS_PRIVATE, None)
    held = [(p, os.open(p, os.O_PATH)) for p in keep]
    opts = f"size={disk_bytes},mode=1777".encode()
    for d in TMPFS:
        _libc_call("mount", b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts)
    for path, fd in held:
        os.makedirs(path, exist_ok=True)
        src, dst = f"/proc/self/fd/{fd}".encode(), path.encode()
        _libc_call("mount", src, dst, None, MS_BIND | MS_REC, None)
        _libc_call("mount", None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        os.close(fd)


def _serve_one(
    ctrl_fd: int, done: int, took: int, disk_bytes: int, uids: tuple[int, int], keep
) -> None:
    """The run's init (pid 1 of its pid namespace): build the run's namespaces as root, then
    become the run's unprivileged uid, non-dumpable, and only then take the request. A run
    with tests: be the judge (``_judge_here``). Otherwise fork the program, reap it and
    reply. ``G`` on ``took`` tells the zygote a request was taken (answer it if we die)."""
    failed = None
    try:  # built while waiting: nothing here depends on the request
        _fresh_namespaces(disk_bytes, keep)
        _libc_call("mount", b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    except OSError as exc:
        failed = exc
    uid = str(uids[0] + int.from_bytes(os.urandom(4), "little") % uids[1])
    try:
        _drop(uid)
        # After the uid change (which resets the flag to the system's default): the program,
        # the same uid, can open neither this memory nor these fds through /proc, nor ptrace.
        _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
        ctrl = _socket.socket(fileno=ctrl_fd)  # keep a reference: collecting it closes the fd
        head, fds = _recv_fds(ctrl, 32, 2)
        req = _read_frame(ctrl_fd, head) if head else None
    except OSError:
        _exit(EXIT_HANGUP)
    if req is None or len(fds) != 2:
        _exit(EXIT_HANGUP)
    os.write(took, b"G")  # the zygote reads it only once we are gone: no wake-up mid-run
    if failed is not None:  # the run's namespaces could not be built: never run it without
        _answer(ctrl_fd, done, took, {"error": f"cannot build the run's namespaces: {failed!r}"})
        _exit(0)
    if req.get("tests"):  # its tests and nonce follow on the control socket (``local.py``)
        _judge_here(req, fds, ctrl_fd, done, took)
    vr, vw = os.pipe()
    pid = _fork_retrying()
    if pid < 0:  # no process slot (the last run's processes still dying): let the host retry
        _exit(EXIT_HANGUP)
    if pid == 0:
        os.close(vr)
        _libc_call("prctl", PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own mm; the init's stays closed
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # Ctrl-C as in any Python
        _program(req, fds[0], fds[1], vw, "-", False)
    req.clear()
    for fd in (vw, *fds):
        os.close(fd)
    _answer(ctrl_fd, done, took, _reap(pid, vr))
    _exit(0)


def _fork_retrying(wait_s: float = 2.0) -> int:
    """fork(), retried while the pids limit is hit (the previous run's processes may still be
    dying when the next run starts); -1 if it never succeeds. The clock is read only once a
    fork failed: the zygote calls this for every run, and what it touches it copies."""
    try:
        return os.fork()
    except BlockingIOError:
        pass
    import time

    deadline = time.monotonic() + wait_s
    while True:
        time.sleep(0.005)
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                return -1


def _fork_in_new_pidns(own_pidns: int, libc) -> int:
    """fork() whose child is pid 1 of a new pid namespace; the zygote itself stays put.

    ``unshare(CLONE_NEWPID)`` only retargets future children and may not be repeated until
    ``setns`` back to our own namespace resets that, which is cheaper than an extra fork.
    The libc functions are called directly, not through ``_libc_call``: the zygote runs this
    for every run, and every page it writes, it copies (a run's init shares them).
    """
    if libc.setns(own_pidns, CLONE_NEWPID) != 0:
        raise libc_error("setns")
    if libc.unshare(CLONE_NEWPID) != 0:
        raise libc_error("unshare")
    pid = _fork_retrying()
    if pid < 0:
        _exit(1)  # the host sees the zygote gone and uses a fresh one
    return pid


def _preload(names) -> None:
    """Import ``names``, with ``random``'s after-fork reseed registered as the C method.

    ``random`` registers its global instance's ``seed`` (Python: ``Random.seed``) to run in
    every forked child, and each run forks twice (its init, then its program or player):
    the Python call touched ~35 pages of the zygote's heap in each child (~0.2 ms). The C
    method it calls does the same reseed from ``os.urandom`` (``seed()`` with no argument;
    ``gauss_next``, the only other state it resets, is None here: the zygote never draws),
    so every run still gets a fresh state, as a fresh interpreter would. Other modules'
    after-fork hooks are registered unchanged, in their order.
    """
    hooks: list[dict] = []
    register = os.register_at_fork
    os.register_at_fork = lambda **kw: hooks.append(kw)  # type: ignore[assignment]
    try:
        for name in names:
            try:
                __import__(name)
            except Exception:  # noqa: BLE001 - a missing optional module is just not preloaded
                pass
    finally:
        os.register_at_fork = register
    inst = getattr(sys.modules.get("random"), "_inst", None)
    for kw in hooks:
        if inst is not None and kw == {"after_in_child": inst.seed} and inst.gauss_next is None:
            import _random  # the C module behind ``random``

            kw = {"after_in_child": _random.Random.seed.__get__(inst)}
        register(**kw)


def _zygote(ctrl_fd: int, disk_bytes: int, uids: tuple[int, int], keep: list[str], preload) -> None:
    """Keep one init forked and waiting for the next request; never read a request itself.

    ``preload``: modules imported once here so each run's fork has them (like a warm
    interpreter would); a run's changes to them die with its fork.
    """
    # The interpreter's AST node types, built by the first ``compile()`` (which checks whether
    # its argument is an AST): ~120 classes, ~1.5 ms in every run's program otherwise. Not
    # the ``ast`` module (only a judge on another interpreter than the host's parses its
    # tests) nor ``socket`` (the init uses ``_socket``): 0.8 MB less heap, which each run's
    # two forks copy as page tables and tear down.
    compile("", "<zygote>", "exec")
    _json("0")  # the judge's JSON scanner (``_wire._json``), built here once
    # ``atexit``: ``_finish`` runs it in every judge and program; imported there, this
    # builtin module went through importlib's (Python) machinery in each run, ~60 page faults.
    import atexit  # noqa: F401
    import traceback  # noqa: F401 - preloaded so each fork need not import it (errors are common)

    _preload(preload)

    libc = _libc()
    for name in ("setns", "unshare", "mount", "prctl"):  # each init would look them up again
        getattr(libc, name)
    # Empty the capability bounding set once: every init and program forked from here
    # inherits it (it only limits what an execve could gain; the zygote and its inits keep
    # their effective capabilities to build namespaces). Each run's program used to drop
    # it itself: ~40 prctl calls, 0.6 ms of CPU per run.
    _drop_caps()
    # Each init is pid 1 of its namespace, which receives from inside it only the signals it
    # handles: none, then. Set once here (no terminal or run can signal the zygote); the C
    # function, not ``signal.signal``, whose enum conversions touched ~65 pages per run.
    _signal.signal(_signal.SIGINT, _signal.SIG_DFL)
    os.environ.pop("PWD", None)  # bwrap's --chdir sets it; runs were never given it
    # Set for the zygote alone (``local.argv``): the dynamic linker bound every symbol of
    # the interpreter and its libraries at start-up, so no run resolves one on its first
    # call (lazy binding wrote each run's GOT pages, ~25 copy-on-write faults a run).
    os.environ.pop("LD_BIND_NOW", None)
    _START_ENV.append(dict(os.environ))  # the sandbox's base environment (``local.ENV``)
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY)
    gc.freeze()  # forks then share these pages instead of copying them on the first GC
    while True:
        dr, dw = os.pipe()
        tr, tw = os.pipe()  # G: took a request, A: answering (read only once it is gone)
        pid = _fork_in_new_pidns(own_pidns, libc)
        if pid == 0:
            os.close(dr)
            os.close(tr)
            os.close(own_pidns)
            gc.disable()
            _serve_one(ctrl_fd, dw, tw, disk_bytes, uids, keep)
        os.close(dw)
        os.close(tw)
        replied = os.read(dr, 1) == b"R"  # or EOF: the init is gone
        os.close(dr)
        os.set_blocking(tr, False)
        try:
            said = os.read(tr, 2)
        except BlockingIOError:
            said = b""
        os.close(tr)
        while True:  # reap finished inits without waiting for the one still tearing down
            try:  # (no rusage after a reply: every page the zygote writes, it copies)
                if replied:
                    done, status = os.waitpid(-1, os.WNOHANG)
                else:
                    done, status, use = os.wait4(-1, 0)
            except ChildProcessError:
                break
            if done == 0:
                break
            if done == pid and os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_HANGUP:
                return
            if done == pid and not replied:
                if said == b"G":  # it died mid-run (killed: memory, or its CPU limit as judge)
                    cpu = use.ru_utime + use.ru_stime
                    reply = {"wait": status, "cpu": cpu, "verdict": b"", "full": False}
                    data = marshal.dumps(reply)
                    sock = _socket.socket(fileno=os.dup(ctrl_fd))
                    sock.sendall(b"%d\n" % len(data) + data)
                    sock.close()
                break


def _once() -> None:
    """Docker: init + program in the container; report after the host's token on stderr."""
    req = _read_frame(0)
    if req is None:
        _exit(0)
    tests = bool(req.get("tests"))
    sr, sw = os.pipe() if tests else (-1, -1)
    # Non-dumpable before any program process exists: the program runs as our uid, and an
    # fd to /proc/1/mem opened while we were dumpable would stay valid (it raced the fork).
    _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    pid, vr = _fork_program(req, 1, 2, "-", False, sr)
    if tests:  # the tests and nonce: read after the fork, passed on to the judge's fd 4
        os.close(sr)
        secrets = _read_frame(0)
        _send(sw, secrets or {})  # blocks while the pipe is full: the judge reads it
        os.close(sw)
        del secrets
    token = _read_frame(0)  # sent after the request: the program never had it
    report = _reap(pid, vr)
    if token is not None:
        os.write(2, MARK + token["token"].encode() + marshal.dumps(report).hex().encode() + b"\n")
    status = report["wait"]
    _exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _session(uid: str) -> None:
    """Trusted parent: relay host cells to the worker, end each cell's output with a marker."""
    _drop(uid)
    # Explicitly, as the local init: the uid change left the host's fs.suid_dumpable, and at 1
    # the worker (same uid) would open this process's memory (the cells' tokens) and fds.
    _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    req = _read_frame(0)
    if req is None:
        _exit(0)
    ctrl = os.dup(0)
    _setup(req)
    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in (ctrl, cmd_w, rep_r):
            os.close(fd)
        _cells(cmd_r, rep_w)
    for fd in (cmd_r, rep_w):
        os.close(fd)
    while True:
        msg = _read_frame(ctrl)
        if msg is None:
            _exit(0)
        data = marshal.dumps({"code": msg["code"]})
        os.write(cmd_w, str(len(data)).encode() + b"\n" + data)
        status = b""
        while not status.endswith(b"\n"):
            ch = os.read(rep_r, 1)
            if not ch:
                _, wait = os.waitpid(pid, 0)
                _exit(os.waitstatus_to_exitcode(wait) & 0xFF)
            status += ch
        tail = MARK + f"{msg['token']}:".encode() + status
        os.write(1, tail)
        os.write(2, tail)


def main() -> None:
    arg, mode, site_dirs = sys.argv[1:4]
    sys.path += [d for d in site_dirs.split(":") if d]
    venv = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    if os.path.exists(os.path.join(venv, "pyvenv.cfg")):  # what ``site`` (skipped) would do
        sys.prefix = sys.exec_prefix = venv
    del sys.argv[1:]
    if mode == "zygote":
        ctrl_fd, disk, uid_base, uid_span, preload, *keep = arg.split(":")
        uids = (int(uid_base), int(uid_span))
        keep = [p for p in keep if p]
        ctrl = os.dup(int(ctrl_fd))  # the lowest free number, whatever the host's was
        _close_all_but({0, 1, 2, ctrl})
        _zygote(ctrl, int(disk), uids, keep, [m for m in preload.split(",") if m])
    elif mode == "session":
        _session(arg)
    else:
        _once()


if __name__ == "__main__":
    main()
