"""In-sandbox test judge: the tests run in an interpreter the candidate's code never touches.

Why: when tests run in the candidate's own interpreter, the candidate can change what they
see. An object whose ``__eq__`` returns True passes ``assert f(x) == y``; the tests' expected
values (and the run's secret nonce) are reachable through frames, ``gc`` or ``/proc/self/mem``;
patching ``abs`` or ``math.isclose`` rewrites the comparison. No in-process guard closes all
of these, so none is tried: the tests and the candidate live in two processes.

* The *judge* (this run's program process) makes itself non-dumpable (its memory, fds and
  ``/proc`` entries are closed to the candidate's uid; ptrace is off in the seccomp filter),
  then forks and ``execve``\\ s a fresh interpreter, the *player*, with only stdin/stdout/stderr
  and two pipes. The player runs the candidate's ``main.py`` as ``__main__`` and then answers
  requests. The tests' source, its expected values and the nonce never enter its memory.
* The judge runs the trusted ``support`` code (e.g. a HumanEval prompt's helpers) and the
  tests. Names the tests use but do not define are resolved once: builtins and standard-library
  modules by the judge itself, the rest (and every name in ``remote``, the entry point) from
  the player: a plain value is copied, anything else becomes a :class:`_Ref`.
* A call through a ``_Ref`` sends its arguments to the player and gets back **plain data**
  (None, bool, int, float, complex, str, bytes, and lists, tuples, sets, frozensets and dicts of
  them; numpy values via ``tolist()``, namedtuples as tuples), decoded by the judge into
  builtin objects it created itself. Anything else comes back as another ``_Ref``: calling it
  or reading an attribute asks the player again (``Solution().method(...)``); comparing,
  hashing or truth-testing it raises, so a non-plain result can never satisfy an assertion.
  An exception in the candidate is re-raised in the judge (a builtin type of the same name,
  else RuntimeError); the player prints its traceback.
* Only when the tests ran to the end does the judge write the nonce to fd 3 (``_harness.py``).

What the candidate still controls is what it returns, which is what the tests measure; and
names the tests use without defining or importing them (they read the candidate's program,
as before). Arguments are copied, so a test cannot see a mutation of its argument list.
Stdlib only; the player is ``python -I -S -c <runner> R:W player SITE_DIRS`` (``_runner.py``).
"""

import ast
import builtins
import json
import os
import sys
from typing import Any

try:  # inside the sandbox the harness source is prepended instead (``local.RUNNER``)
    from ._harness import (
        MARK,
        VERDICT_FD,
        WORK,
        _exit,
        _fail,
        _libc_call,
        _main_module,
        _read_exact,
        _report,
        _write,
    )
except ImportError:
    pass

PR_SET_DUMPABLE_ = 4
MAX_FRAME = 1 << 28
_NOT_RAISED = ("SystemExit", "KeyboardInterrupt", "GeneratorExit")
_CONTAINERS: dict[type, str] = {list: "l", tuple: "t", set: "S", frozenset: "F"}


def _send(fd: int, msg: object) -> None:
    body = json.dumps(msg).encode()
    data = str(len(body)).encode() + b"\n" + body
    view, done = memoryview(data), 0
    while done < len(data):
        done += os.write(fd, view[done:])


def _recv(fd: int) -> Any:
    """One frame, or raise EOFError (the peer is gone) / ValueError (a malformed frame)."""
    head = b""
    while not head.endswith(b"\n"):
        ch = os.read(fd, 1)
        if not ch:
            raise EOFError("the candidate's process ended")
        head += ch
        if len(head) > 12:
            raise ValueError("malformed frame from the candidate's process")
    n = int(head)
    if not 0 <= n <= MAX_FRAME:
        raise ValueError(f"a frame of {n} bytes from the candidate's process")
    body = _read_exact(fd, n)
    if body is None:
        raise EOFError("the candidate's process ended")
    return json.loads(bytes(body))


def _enc(v: Any, refs: dict | None, depth: int = 0) -> list:
    """Plain data as tagged JSON; other objects as refs (player) or TypeError (judge)."""
    t = type(v)
    if v is None:
        return ["n"]
    if depth > 200:
        raise ValueError("the value is nested too deeply")
    if t is bool:
        return ["B", v]
    if t is int:
        return ["i", hex(v)]  # hex: no int_max_str_digits limit
    if t is float:
        return ["f", v]
    if t is complex:
        return ["c", v.real, v.imag]
    if t is str:
        return ["s", v]
    if t is bytes:
        return ["y", v.hex()]
    if t is _Ref:
        return ["r", v._id]
    tag = _CONTAINERS.get(t)
    if tag is None and isinstance(v, tuple) and hasattr(t, "_fields"):
        tag = "t"  # a namedtuple compares like its tuple
    if tag is not None:
        return [tag, [_enc(x, refs, depth + 1) for x in v]]
    if t is dict or (isinstance(v, dict) and t.__module__ == "collections"):
        return ["d", [[_enc(k, refs, depth + 1), _enc(x, refs, depth + 1)] for k, x in v.items()]]
    if refs is not None and t.__module__ == "numpy" and hasattr(v, "tolist"):
        return _enc(v.tolist(), refs, depth + 1)
    if refs is None:
        raise TypeError(f"a test passed a {t.__name__} to the candidate (plain data only)")
    refs[len(refs)] = v
    return ["r", len(refs) - 1]


def _dec(x: list, conn: "_Player | None", objs: dict | None = None) -> Any:
    """Build builtin objects from tagged JSON (the judge never unpickles or evaluates)."""
    tag = x[0]
    if tag == "n":
        return None
    if tag == "B":
        return bool(x[1])
    if tag == "i":
        return int(x[1], 16)
    if tag == "f":
        return float(x[1])
    if tag == "c":
        return complex(float(x[1]), float(x[2]))
    if tag == "s":
        return str(x[1])
    if tag == "y":
        return bytes.fromhex(x[1])
    if tag in ("l", "t", "S", "F"):
        items = [_dec(y, conn, objs) for y in x[1]]
        return {"l": list, "t": tuple, "S": set, "F": frozenset}[tag](items)
    if tag == "d":
        return {_dec(k, conn, objs): _dec(v, conn, objs) for k, v in x[1]}
    if tag == "r":
        if objs is not None:  # the player: one of its own objects
            return objs[int(x[1])]
        return _Ref(conn, int(x[1]), str(x[2]) if len(x) > 2 else "object")
    raise ValueError(f"unknown tag {tag!r} from the candidate's process")


class _Ref:
    """A non-plain object living in the player. Calls and attributes go to the player;
    comparisons, hashing and truth tests raise, so it never satisfies an assertion."""

    __slots__ = ("_conn", "_id", "_kind")
    _conn: Any

    def __init__(self, conn: Any, ref: int | str, kind: str) -> None:
        object.__setattr__(self, "_conn", conn)
        object.__setattr__(self, "_id", ref)
        object.__setattr__(self, "_kind", kind)

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._conn.ask(["call", self._id, _enc(list(args), None), _enc(kwargs, None)])

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._conn.ask(["attr", self._id, name])

    def __iter__(self):
        return iter(self._conn.ask(["iter", self._id]))

    def __repr__(self) -> str:
        return f"<the candidate's {self._kind}>"

    def _refuse(self, *_: object) -> bool:
        raise TypeError(f"the candidate returned {self!r}, not plain data; it cannot be compared")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = _refuse
    __hash__ = __len__ = __contains__ = _refuse


class _Player:
    """The judge's end: a fresh interpreter running the candidate (see the module docstring)."""

    def __init__(self, path: str) -> None:
        argv = sys.orig_argv
        i = argv.index("-c")  # [python, -I, -S, -c, RUNNER, ARG, MODE, SITE_DIRS]
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # no test source runs before execve replaces this image
            try:  # pipes to 13/14 via fds above any open one (RLIMIT_NOFILE is 256)
                os.dup2(os.dup2(to_r, 250), 13)
                os.dup2(os.dup2(from_w, 251), 14)
                os.closerange(3, 13)
                os.closerange(15, 1 << 16)
                args = [sys.executable, "-I", "-S", "-c", argv[i + 1], "13:14", "player"]
                os.execve(sys.executable, args + [argv[i + 4]], dict(os.environ))
            finally:
                _exit(127)
        os.close(to_r)
        os.close(from_w)
        _send(self.to_w, path)

    def ask(self, msg: list) -> Any:
        _send(self.to_w, msg)
        reply = _recv(self.from_r)
        if not isinstance(reply, list) or not reply:
            raise ValueError("malformed reply from the candidate's process")
        if reply[0] == "ok":
            return _dec(reply[1], self)
        if reply[0] == "exc":
            name, text = str(reply[1]), str(reply[2])
            cls = getattr(builtins, name, None)
            if (
                not (isinstance(cls, type) and issubclass(cls, BaseException))
                or name in _NOT_RAISED
            ):
                cls, text = RuntimeError, f"{name}: {text}"
            raise cls(text)
        raise RuntimeError(f"the candidate's program ended the call: {reply[1:]!r}")

    def close(self) -> None:
        for fd in (self.to_w, self.from_r):
            os.close(fd)
        try:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        except OSError:
            pass


def _free_names(tree: ast.AST) -> set[str]:
    """Names the tests read but never bind (conservatively: bound anywhere = theirs)."""
    loads: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return loads - bound


def _bind(ns: dict, tree: ast.AST, remote: list, player: _Player) -> None:
    """Free names: builtins and stdlib modules from the judge, the rest from the player."""
    ask = set(remote)
    for name in _free_names(tree) - ask:
        if name in ns or hasattr(builtins, name):
            continue
        if name in sys.stdlib_module_names:
            ns[name] = __import__(name)
        else:
            ask.add(name)
    for name in remote:  # e.g. a HumanEval prompt's stub of the entry point
        ns.pop(name, None)
    if ask:  # only the names asked for: the reply is the candidate's to write
        found = player.ask(["names", sorted(ask)])
        ns.update({name: found[name] for name in ask if name in found})


def _run_tests(req: dict) -> int:
    """The judge: returns the run's exit code; writes the verdict only if every test ran."""
    path = os.path.join(WORK, "main.py")
    with open(path, "w") as f:
        f.write(req.pop("code"))
    check, support = req.pop("check"), req.pop("support", "")
    remote, nonce = list(req.pop("remote", [])), req.pop("nonce", b"")
    _libc_call("prctl", PR_SET_DUMPABLE_, 0, 0, 0, 0)
    player = _Player(path)
    try:
        ready = _recv(player.from_r)
        if ready != ["ready"]:
            return _fail(str(ready[1] if isinstance(ready, list) else ready))
        ns: dict = {"__name__": "__tests__", "__builtins__": builtins}
        if support:
            exec(compile(support, "<support>", "exec"), ns)
        tree = ast.parse(check, "<tests>")
        _bind(ns, tree, remote, player)
        exec(compile(tree, "<tests>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001 - a failing test, reported like the interpreter
        _report(exc)
        return 1
    finally:
        player.close()
    _write(VERDICT_FD, MARK + nonce)
    return 0


def _player_serve(scope: dict, rd: int, wr: int) -> None:
    objs: dict = {}
    while True:
        try:
            msg = _recv(rd)
        except (EOFError, ValueError):
            _exit(0)
        op = msg[0]
        try:
            if op == "names":
                reply = {n: _enc(scope[n], objs) for n in msg[1] if n in scope}
                out: list = ["ok", ["d", [[["s", k], v] for k, v in reply.items()]]]
            else:
                target = objs[msg[1]] if isinstance(msg[1], int) else scope[msg[1]]
                if op == "call":
                    args = _dec(msg[2], None, objs)
                    kwargs = _dec(msg[3], None, objs)
                    value = target(*args, **kwargs)
                elif op == "attr":
                    value = getattr(target, msg[2])
                else:
                    value = list(target)
                out = ["ok", _enc(value, objs)]
                if out[1][0] == "r":
                    out[1].append(type(value).__name__)
        except SystemExit as exc:
            out = ["exit", repr(exc)]
        except BaseException as exc:  # noqa: BLE001 - the candidate's error, for the judge
            _report(exc)
            out = ["exc", type(exc).__name__, str(exc)[:2000]]
        _send(wr, out)


def _player(arg: str) -> None:
    """The player: run ``main.py`` as ``__main__``, then answer the judge until EOF."""
    rd, wr = (int(x) for x in arg.split(":"))
    path = _recv(rd)
    sys.argv = [path]
    sys.path.insert(0, WORK)
    scope = _main_module(path).__dict__
    try:
        with open(path) as f:
            source = f.read()
        exec(compile(source, path, "exec"), scope)
    except SystemExit as exc:
        _send(wr, ["dead", f"the program exited ({exc!r}) before the tests finished"])
        _exit(1)
    except BaseException as exc:  # noqa: BLE001 - report like the interpreter would
        _report(exc)
        _send(wr, ["dead", f"the program raised {type(exc).__name__} before the tests ran"])
        _exit(1)
    _send(wr, ["ready"])
    _player_serve(scope, rd, wr)
