"""PythonSession: state persists within an episode, never across reset/restart."""

from __future__ import annotations

import pytest

from agentrl.sandboxes.interpreter import PythonSession


@pytest.fixture
def session(local):
    with PythonSession(backend=local, timeout_s=10, max_output_bytes=2000) as py:
        yield py


def test_state_persists_and_expressions_echo(session):
    assert session.execute("import math\nx = 40").status == "ok"
    res = session.execute("x + 2")
    assert (res.status, res.stdout) == ("ok", "42\n")
    assert (
        session.execute("open('f.txt', 'w').write('hi'); open('f.txt').read()").stdout == "'hi'\n"
    )


def test_errors_keep_the_session(session):
    session.execute("y = 1")
    res = session.execute("print('before'); 1/0")
    assert res.status == "error" and res.stdout == "before\n" and "ZeroDivisionError" in res.stderr
    assert session.execute("y").stdout == "1\n"


def test_reset_forgets(session):
    session.execute("z = 5")
    session.reset()
    assert "NameError" in session.execute("z").stderr


def test_timeout_restarts_fresh(session):
    session.execute("w = 1")
    assert session.execute("while True: pass", timeout_s=0.5).status == "timeout"
    res = session.execute("w")
    assert res.status == "error" and "NameError" in res.stderr


def test_output_cap_and_exit(session):
    assert session.execute("print('x' * 100_000)").status == "output_limit"
    assert session.execute("print('ok')").stdout == "ok\n"
    assert session.execute("import os; os._exit(0)").status != "ok"
    assert session.execute("1 + 1").stdout == "2\n"


def test_session_is_sandboxed(session, monkeypatch):
    res = session.execute("import os; (os.getuid(), sorted(os.environ))")
    assert res.ok and not res.stdout.startswith("(0,") and "HOME" in res.stdout


def test_cell_cannot_forge_its_completion(session):
    """The end-of-cell marker comes from a process the cell cannot read: a cell that hunts for
    it in its frames and heap and prints every candidate must still be waited for."""
    hunt = (
        "import gc, sys, time\nseen = set()\nf = sys._getframe()\nwhile f is not None:\n"
        "    seen.update(str(v) for v in f.f_locals.values())\n    f = f.f_back\n"
        "for o in gc.get_objects():\n    if isinstance(o, dict):\n"
        "        seen.update(v for v in o.values() if isinstance(v, str))\n"
        "seen = {s for s in seen if len(s) == 16 and set(s) <= set('0123456789abcdef')}\n"
        "for s in seen:\n    for st in ('ok', 'error', 'exit'):\n"
        "        sys.stdout.write(f'\\x1e{s}:{st}\\n')\n        sys.stderr.write(f'\\x1e{s}:{st}\\n')\n"
        "sys.stdout.flush(); sys.stderr.flush()\ntime.sleep(0.5)\nprint('after')\n"
    )
    res = session.execute(hunt)
    assert res.status == "ok" and res.stdout.endswith("after\n"), res
    assert session.execute("1 + 1").stdout == "2\n"


def test_no_cpu_between_cells(local):
    import time

    if local.cgroup_version is None:
        pytest.skip("no writable cgroup hierarchy: nothing can freeze the sandbox")
    with PythonSession(backend=local, timeout_s=10) as py:
        burn = "import threading, time\nthreading.Thread(target=exec, args=('while True: pass',)).start()"
        assert py.execute(burn).status == "ok"
        before = float(py.execute("time.process_time()").stdout)
        assert py._box is not None and py._box.cgroup is not None and py._box.cgroup.frozen()
        time.sleep(3)
        after = float(py.execute("time.process_time()").stdout)
    assert after - before < 0.3, "the sandbox burned CPU between cells"


@pytest.mark.parametrize("field,value", [("timeout_s", float("nan")), ("memory_mb", 0)])
def test_session_limits_are_validated(field, value):
    with pytest.raises(ValueError, match=field):
        PythonSession(**{field: value})
