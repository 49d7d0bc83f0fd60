"""The tests compiled by the host (``sandboxes/_compiled.py``) judge exactly like the tests
compiled by the judge itself: same verdicts, same errors, and a host run with ``python -O``
still runs the tests' ``assert`` statements (compiled away, every answer would pass)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agentrl.sandboxes import ExecRequest, run_many
from agentrl.sandboxes.local import LocalBackend


@pytest.fixture(autouse=True)
def _needs_local(local):
    """Skips (through ``conftest.local``) where the local sandbox cannot run."""


RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
TESTS = "import math\nassert add(1, 2) == 3\nassert math.isclose(add(0.5, 0.25), 0.75)\n"


def _judge(own_python: bool, reqs: list[ExecRequest]):
    backend = LocalBackend()
    backend.own_python = own_python
    try:
        return run_many(reqs, backend=backend, concurrency=2)
    finally:
        backend.close()


@pytest.mark.parametrize("own_python", [True, False], ids=["host-compiled", "judge-compiled"])
def test_both_paths_give_the_same_verdicts(own_python):
    support = "from typing import List\n\n\ndef add(a, b):\n    ...\n"
    reqs = [
        ExecRequest(RIGHT, check=TESTS, remote=("add",), support=support, timeout_s=10),
        ExecRequest(WRONG, check=TESTS, remote=("add",), support=support, timeout_s=10),
        ExecRequest(RIGHT, check="assert add(1, 2) ==\n", remote=("add",), timeout_s=10),
        ExecRequest(RIGHT, check="assert True\n", remote=("add",), timeout_s=10),
    ]
    right, wrong, broken, unused = _judge(own_python, reqs)
    assert right.verified is True, right.stderr
    assert wrong.verified is False and "AssertionError" in wrong.stderr
    assert broken.verified is False and "SyntaxError" in broken.stderr
    assert unused.verified is False and "never called" in unused.stderr


def test_a_host_running_python_O_still_runs_the_asserts():
    code = (
        "from agentrl.sandboxes import ExecRequest, run_many\n"
        "from agentrl.sandboxes.local import LocalBackend\n"
        "b = LocalBackend()\n"
        "assert b.own_python\n"
        f"reqs = [ExecRequest(c, check={TESTS!r}, remote=('add',), timeout_s=10)"
        f" for c in ({RIGHT!r}, {WRONG!r})]\n"
        "print([r.verified for r in run_many(reqs, backend=b, concurrency=2)])\n"
        "b.close()\n"
    )
    out = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[True, False]"
