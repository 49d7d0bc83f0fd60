"""Semantics every backend must share: results, limits plumbing, batching, registry."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from agentrl.sandboxes import (
    ExecRequest,
    ExecResult,
    arun_many,
    available_backends,
    get_backend,
    run_many,
)


def test_ok_stdout_and_exit_code(backend):
    res = backend.run(ExecRequest("print('hi')\nimport sys; sys.exit(0)"))
    assert isinstance(res, ExecResult)
    assert (res.status, res.exit_code, res.stdout) == ("ok", 0, "hi\n")


def test_error_keeps_traceback_and_code(backend):
    res = backend.run(ExecRequest("raise ValueError('boom')"))
    assert res.status == "error" and res.exit_code == 1
    assert "ValueError: boom" in res.stderr and "main.py" in res.stderr
    res = backend.run(ExecRequest("import sys; sys.exit(7)"))
    assert (res.status, res.exit_code) == ("error", 7)


def test_stdin_files_env(backend):
    req = ExecRequest(
        "import os\nprint(input(), open('data/in.txt').read(), os.environ['MY_VAR'])",
        stdin="line\n",
        files={"data/in.txt": "payload"},
        env={"MY_VAR": "v"},
    )
    assert backend.run(req).stdout == "line payload v\n"


def test_bash(backend):
    res = backend.run(
        ExecRequest(
            "read x; echo got-$x; cat f.bin | wc -c; exit 3",
            "bash",
            stdin="y\n",
            files={"f.bin": b"\x00\x01\x02"},
        )
    )
    assert (res.status, res.exit_code, res.stdout) == ("error", 3, "got-y\n3\n")


def test_installed_packages_importable(backend):
    res = backend.run(ExecRequest("import json, sqlite3; print(json.dumps([1]))"))
    assert res.stdout == "[1]\n", res.stderr


def test_run_many_keeps_order_and_async(backend):
    reqs = [ExecRequest(f"print({i} * {i})") for i in range(6)]
    assert [r.stdout for r in run_many(reqs, backend=backend, concurrency=2)] == [
        f"{i * i}\n" for i in range(6)
    ]
    got = asyncio.run(arun_many(reqs[:3], backend=backend, concurrency=2))
    assert [r.stdout for r in got] == ["0\n", "1\n", "4\n"]


def test_registry_and_validation():
    assert {"local", "docker"} <= set(available_backends())
    with pytest.raises(KeyError):
        get_backend("nope")
    with pytest.raises(ValueError):
        ExecRequest("x", language="ruby")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ExecRequest("x", files={"../escape": "x"})


def test_no_state_leaks_between_runs(backend):
    first = backend.run(ExecRequest("open('/tmp/mark', 'w').write('x'); open('left', 'w')"))
    assert first.ok
    code = "import os, json; print(json.dumps([os.path.exists('/tmp/mark'), os.listdir('.')]))"
    exists, names = json.loads(backend.run(ExecRequest(code)).stdout)
    # An interpreter installed under /work (e.g. this checkout's venv) is bound read-only there.
    prefixes = map(os.path.realpath, (sys.prefix, sys.base_prefix))
    under_work = {p.split("/")[2] for p in prefixes if p.startswith("/work/")}
    assert not exists and set(names) - under_work == {"main.py"}


def test_environment_is_the_base_or_the_requests_and_never_an_earlier_runs(local):
    """The zygote starts with the base environment and a run asking for exactly it keeps it
    (no rebuild): what each run sees is still exactly its request's, nothing of bwrap's (PWD)
    and nothing an earlier run on the same zygote set."""
    from agentrl.sandboxes.local import ENV

    show = "import json, os\nprint(json.dumps(dict(os.environ)))"
    dirty = "import os\nos.environ['LEAK'] = '1'\nos.putenv('LEAK2', '1')\nos.environ.pop('PATH')"
    runs = [ExecRequest(show), ExecRequest(dirty), ExecRequest(show)]
    runs += [ExecRequest(show, env={"MY_VAR": "x", "HOME": "/tmp"}), ExecRequest(show)]
    one = get_backend("local", pool_size=1)  # every run on the same zygote
    try:
        results = run_many(runs, backend=one, concurrency=1)
        check = "def f():\n    import os\n    return dict(os.environ)\n"
        judged = one.run(ExecRequest(check, check=f"assert f() == {ENV!r}", remote=("f",)))
    finally:
        one.close()
    assert [r.status for r in results] == ["ok"] * 5
    shown = [json.loads(r.stdout) for r in results if r.stdout]
    assert shown == [ENV, ENV, {**ENV, "MY_VAR": "x", "HOME": "/tmp"}, ENV]
    assert judged.verified is True, judged.stderr
