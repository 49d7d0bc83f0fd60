"""In-sandbox bootstrap, run as ``python -I -c <this source> UID MODE``; stdlib only.

It drops to the unprivileged ``UID`` first (``-`` when the engine already did), then reads a
length-prefixed JSON frame from fd 0: limits, env, files and stdin. ``once`` mode then runs the
program (Python in-process, bash via exec); ``session`` mode keeps one namespace and runs
framed cells, ending each cell's output with ``MARK token:status``. The host does every kill.
"""

import ast
import base64
import json
import os
import resource
import sys
import traceback

MARK = b"\x1e"
WORK = "/work"


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
    return json.loads(b"".join(chunks))


def _limit(kind: int, value: int | None) -> None:
    if value is None:
        return
    soft, hard = resource.getrlimit(kind)
    cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (cap, cap))


def _setup(req: dict) -> None:
    lim = req["limits"]
    if lim.get("cpu_s"):
        cpu = int(lim["cpu_s"]) + 1
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
            f.write(base64.b64decode(content))
    os.environ.clear()
    os.environ.update(req["env"])
    fd = os.open("/tmp", os.O_RDWR | os.O_TMPFILE, 0o600)
    os.write(fd, req.get("stdin", "").encode())
    os.lseek(fd, 0, os.SEEK_SET)
    os.dup2(fd, 0)
    os.close(fd)


def _report(exc: BaseException) -> None:
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


def main() -> None:
    uid, mode = sys.argv[1], sys.argv[2]
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
