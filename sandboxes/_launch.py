"""In-sandbox launcher of a sandboxed command (``command.py``), run as ``python -I -S -c``.

It starts as uid 0 with only CAP_SETUID/CAP_SETGID/CAP_NET_BIND_SERVICE left (bwrap, no user
namespace) in the sandbox's private network namespace, whose only interface is its loopback. Before the
command exists it listens on ``127.0.0.1:PORT`` there (the same port number as the host's
gateway, so the URLs the command is given work unchanged) and relays each connection to the
unix socket bound at ``/run/agentrl/gateway.sock``, behind which the host relays to that one
port: no other host address or port is reachable. Then it forks the command, which drops
every group and its uid to the run's own unprivileged uid, sets rlimits, enters ``/work`` and
execs. After the command exits, the launcher copies ``/work/result.json`` (opened without
following links, a regular file only, capped) to ``/run/agentrl/result.json``, a folder the
command's uid cannot write, and exits with the command's status. Standard library only:
agentrl itself is not visible in the sandbox.
"""

import json
import os
import resource
import socket
import stat
import sys
import threading

RUN = "/run/agentrl"


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _relay(listener: socket.socket) -> None:
    while True:
        conn, _ = listener.accept()
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(f"{RUN}/gateway.sock")
        except OSError:
            conn.close()
            up.close()
            continue
        threading.Thread(target=_pipe, args=(conn, up), daemon=True).start()
        threading.Thread(target=_pipe, args=(up, conn), daemon=True).start()


def _child(spec: dict) -> None:
    uid = int(spec["uid"])
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)  # every capability goes with uid 0
    for name, value in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    os.chdir("/work")
    argv = spec["argv"]
    try:
        os.execvpe(argv[0], argv, spec["env"])
    except OSError as e:
        os.write(2, f"cannot start {argv[0]}: {e}\n".encode())
    os._exit(127)


def _copy_result(cap: int) -> None:
    try:
        fd = os.open("/work/result.json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        data = os.read(fd, cap + 1)
    finally:
        os.close(fd)
    with open(f"{RUN}/result.json", "wb") as f:
        f.write(data)


def main() -> int:
    with open(f"{RUN}/spec.json", encoding="utf-8") as f:
        spec = json.load(f)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(spec["port"])))
    listener.listen(128)
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        listener.close()
        _child(spec)
    threading.Thread(target=_relay, args=(listener,), daemon=True).start()
    _, status = os.waitpid(pid, 0)
    _copy_result(int(spec["result_max"]))
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
