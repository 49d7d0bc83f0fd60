"""No run sees bytes of another run; limits are validated up front and end with the right status.

Why: a code reward's hidden tests and other episodes' programs must stay invisible to the
program being graded, or the policy learns to read them. The leak test writes a random token
into every part of earlier requests (code, stdin, env, files) and lets a later run scan all of
its own readable memory for any of them, on a reused local zygote, on the default pool with
concurrent runs, and on docker. A positive control proves the scan finds its own token.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
import subprocess
import tempfile
import venv
from pathlib import Path

import pytest

from agentrl.sandboxes import ExecRequest, LocalBackend, run_many

PREFIX = "QZLEAK"
SCAN = r"""
import ctypes, re
pat = re.compile(rb"QZ" + rb"LEAK([0-9a-f]{32})")
found = set()
for line in open('/proc/self/maps').read().splitlines():
    span, perms = line.split()[:2]
    if not perms.startswith('r') or line.endswith(('[vvar]', '[vsyscall]', '[vvar_vclock]')):
        continue
    lo, hi = (int(x, 16) for x in span.split('-'))
    found.update(m.group(1).decode() for m in pat.finditer(ctypes.string_at(lo, hi - lo)))
print(' '.join(sorted(found)))
"""


def _secret_request(token: str) -> ExecRequest:
    marked = PREFIX + token
    code = f"s = {marked!r}\nprint(len(s + input() + open('hidden.txt').read()))\n"
    return ExecRequest(
        code, stdin=marked * 50 + "\n", env={"HIDDEN": marked}, files={"hidden.txt": marked}
    )


def _assert_no_leak(run_one, earlier: list[str]) -> None:
    own = secrets.token_hex(16)
    res = run_one(ExecRequest(SCAN, env={"OWN": PREFIX + own}, timeout_s=30, memory_mb=256))
    assert res.ok, res.stderr
    seen = set(res.stdout.split())
    assert own in seen, "the scan must find its own token (positive control)"
    assert not seen & set(earlier), "a run saw bytes of an earlier run"


def test_reused_zygote_holds_no_earlier_request(local_reason_skip):
    with LocalBackend(pool_size=0, max_idle=1) as backend:
        earlier = [secrets.token_hex(16) for _ in range(4)]
        for token in earlier:
            assert backend.run(_secret_request(token)).ok
        _assert_no_leak(backend.run, earlier)


def test_no_leak_on_shared_backend_with_run_many(backend):
    earlier = [secrets.token_hex(16) for _ in range(6)]
    assert all(r.ok for r in run_many(map(_secret_request, earlier), backend, concurrency=3))
    _assert_no_leak(backend.run, earlier)


@pytest.mark.parametrize(
    "field,value",
    [
        ("timeout_s", math.nan),
        ("timeout_s", math.inf),
        ("timeout_s", 0),
        ("timeout_s", -1),
        ("memory_mb", 0),
        ("memory_mb", -5),
        ("memory_mb", 1.5),
        ("memory_mb", True),
        ("cpu_time_s", math.nan),
        ("cpu_time_s", 0),
        ("max_output_bytes", 0),
        ("max_output_bytes", 2.0),
    ],
)
def test_bad_limits_are_rejected_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ExecRequest("print(1)", **{field: value})


@pytest.mark.parametrize(
    "field,value", [("pids", 0), ("cpus", math.nan), ("cpus", 0), ("disk_mb", -1), ("max_idle", -1)]
)
def test_bad_backend_limits_are_rejected(local_reason_skip, field, value):
    with pytest.raises(ValueError, match=field):
        LocalBackend(**{field: value})


FILL = (  # no error handling: the run must end for lack of memory, however the kernel says it
    "for d in ('/dev/shm', '/tmp', '/work'):\n"
    "    with open(d + '/fill', 'wb') as f:\n"
    "        for _ in range(64):\n            f.write(b'1' * (1 << 20))\n            f.flush()\n"
)


def test_filling_temp_dirs_at_small_memory_is_a_memory_status(backend):
    res = backend.run(ExecRequest(FILL, memory_mb=32, timeout_s=20))
    assert res.status == "memory", res
    assert backend.run(ExecRequest("print('alive')")).stdout == "alive\n"


def test_file_size_limit_is_a_disk_status(backend):
    res = backend.run(ExecRequest("head -c 300M /dev/zero > big", "bash", timeout_s=20))
    assert res.status == "disk", res


def test_cpu_time_limit_is_a_timeout_even_when_sigxcpu_is_ignored(backend):
    code = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass\n"
    res = backend.run(ExecRequest(code, timeout_s=20, cpu_time_s=1))
    assert res.status == "timeout", res


def test_large_stdin_arrives_whole(backend):
    data = "x" * (40 << 20) + "\n"
    code = "import sys\nprint(len(sys.stdin.buffer.read()))\n"
    res = backend.run(ExecRequest(code, stdin=data, timeout_s=60, memory_mb=512))
    assert (res.status, res.stdout) == ("ok", f"{len(data)}\n"), res.stderr[-500:]


def test_stdin_too_large_for_the_time_is_a_timeout(backend):
    code = "import sys\nprint(len(sys.stdin.read()))\n"
    res = backend.run(ExecRequest(code, stdin="y" * (100 << 20), timeout_s=0.05))
    assert res.status == "timeout", res


def test_venv_under_tmp_stays_visible(local_reason_skip):
    root = Path(tempfile.mkdtemp(prefix="agentrl-venv-", dir="/tmp"))
    root.chmod(0o755)  # the program runs as an unprivileged uid: the venv must be readable
    venv.create(root, with_pip=False, symlinks=True)
    py = root / "bin" / "python"
    site = subprocess.check_output([py, "-c", "import site; print(site.getsitepackages()[0])"])
    (root / site.decode().strip().removeprefix(str(root) + "/") / "venvmark.py").write_text("X=7")
    code = "import os, sys, venvmark\nprint(os.path.exists(sys.executable), sys.prefix, venvmark.X)"
    try:
        with LocalBackend(python=str(py)) as backend:
            res = backend.run(ExecRequest(code))
    finally:
        shutil.rmtree(root)
    assert (res.status, res.stdout.split()) == ("ok", ["True", str(root), "7"]), res.stderr


@pytest.fixture
def local_reason_skip():
    if os.geteuid() != 0 or shutil.which("bwrap") is None:
        pytest.skip("local sandbox needs root and bubblewrap (scripts/setup-sandbox.sh)")


def test_close_leaves_no_sandbox_process(local_reason_skip):
    backend = LocalBackend(pool_size=0, max_idle=2)
    assert all(r.ok for r in run_many([ExecRequest("print(1)")] * 2, backend, concurrency=2))
    procs = [z.box.proc for z in backend.pool._idle]
    backend.close()
    assert procs and all(p.poll() is not None for p in procs)


def test_run_after_one_that_left_many_processes(backend):
    """The next run starts while the previous run's processes may still be dying."""
    code = "import os, time\nfor _ in range(50):\n    if os.fork() == 0:\n        time.sleep(30)\n"
    for _ in range(3):
        assert backend.run(ExecRequest(code, timeout_s=10)).ok
        assert backend.run(ExecRequest("print('next')")).stdout == "next\n"
