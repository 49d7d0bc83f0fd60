"""Hostile programs must be contained on every backend, and this test process must survive.

Each test states the attack and what "contained" means; none asserts timings.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from agentrl.sandboxes import ExecRequest

LEAK = "LEAKED"


def _procs_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker`` (sandbox leftovers are visible here)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_fork_bomb(backend):
    res = backend.run(
        ExecRequest(
            "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", timeout_s=2
        )
    )
    assert res.status in ("timeout", "killed")
    assert backend.run(ExecRequest("print('still fine')")).stdout == "still fine\n"


def test_bash_fork_bomb(backend):
    res = backend.run(ExecRequest(":(){ :|:& };:", "bash", timeout_s=2))
    assert res.status != "ok" or res.exit_code is not None
    assert backend.run(ExecRequest("echo ok", "bash")).stdout == "ok\n"


def test_memory_bomb(backend):
    code = "x = []\nwhile True:\n    x.append(bytearray(16 << 20))"
    res = backend.run(ExecRequest(code, memory_mb=128, timeout_s=10))
    assert res.status == "memory"


def test_cpu_burner(backend):
    res = backend.run(ExecRequest("while True: pass", timeout_s=1))
    assert res.status == "timeout"


def test_signal_ignoring_loop_is_killed(backend):
    code = (
        "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True: pass"
    )
    res = backend.run(ExecRequest(code, timeout_s=1, cpu_time_s=10))
    assert res.status == "timeout"


def test_output_flood(backend):
    res = backend.run(
        ExecRequest("while True: print('x' * 1000)", max_output_bytes=10_000, timeout_s=10)
    )
    assert res.status == "output_limit" and res.truncated
    assert len(res.stdout) <= 10_000
    res = backend.run(
        ExecRequest("import os\nwhile True: os.write(2, b'e' * 65536)", max_output_bytes=4096)
    )
    assert res.status == "output_limit" and len(res.stderr) <= 4096


def test_disk_fill(backend):
    code = (
        "import os\nfor d in ('/work', '/tmp'):\n    try:\n        with open(d + '/fill', 'wb') as f:\n"
        "            while True: f.write(b'0' * (1 << 20)); f.flush()\n"
        "    except OSError as e:\n        print(d, e.errno)\n"
        "try:\n    open('/usr/evil', 'w')\nexcept OSError as e:\n    print('usr', e.errno)"
    )
    res = backend.run(ExecRequest(code, memory_mb=512, timeout_s=20))
    assert res.status == "ok", res
    errnos = dict(line.split() for line in res.stdout.splitlines())
    assert set(errnos) == {"/work", "/tmp", "usr"}
    assert errnos["/work"] in ("28", "27")  # ENOSPC or EFBIG
    assert errnos["usr"] in ("30", "13")  # EROFS or EACCES
    assert not Path("/usr/evil").exists()


def test_host_files_are_invisible(backend, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    code = f"""
import os
for path in ('/etc/shadow', {str(secret)!r}, '/root/.bashrc', '/root/.ssh/id_rsa'):
    try:
        print('{LEAK}', path, open(path).read()[:20])
    except OSError:
        pass
if os.path.exists('/etc/passwd') and 'root:' in open('/etc/passwd').read():
    print('{LEAK} host passwd')
print(sorted(os.listdir('/root')) if os.path.isdir('/root') else [])
"""
    res = backend.run(ExecRequest(code))
    assert res.ok, res.stderr
    assert LEAK not in res.stdout and "TOPSECRET" not in res.stdout
    assert res.stdout.strip().splitlines()[-1] in ("[]", "['.pyenv']")


def test_host_env_is_invisible(backend, monkeypatch):
    monkeypatch.setenv("AGENTRL_TEST_SECRET", "hunter2")
    res = backend.run(ExecRequest("import os; print(sorted(os.environ.items()))"))
    assert res.ok and "hunter2" not in res.stdout and "AGENTRL_TEST_SECRET" not in res.stdout
    res = backend.run(ExecRequest("cat /proc/1/environ /proc/self/environ; env", "bash"))
    assert "hunter2" not in res.stdout


def test_no_network_to_host_loopback(backend):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    code = f"""
import socket
try:
    socket.create_connection(('127.0.0.1', {port}), timeout=2)
    print('{LEAK}')
except OSError as e:
    print('blocked', e.errno)
"""
    try:
        res = backend.run(ExecRequest(code, timeout_s=5))
    finally:
        stop.set()
        thread.join()
        server.close()
    assert res.ok and res.stdout.startswith("blocked"), res
    assert accepted == []


@pytest.mark.parametrize(
    "code,lang",
    [
        ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", "python"),
        ("import os, signal\nos.kill(1, signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)", "python"),
        ("kill -9 $PPID; kill -9 1; kill -9 -1; echo done", "bash"),
    ],
)
def test_killing_parents_is_contained(backend, code, lang):
    res = backend.run(ExecRequest(code, lang, timeout_s=5))
    assert res.status in ("ok", "error", "killed")
    assert os.getpid() > 0 and backend.run(ExecRequest("print(1)")).stdout == "1\n"


def test_daemons_do_not_outlive_the_run(backend):
    marker = "4242.125"
    code = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '{marker}'])
    os._exit(0)
print('parent done')
"""
    res = backend.run(ExecRequest(code, timeout_s=10))
    assert res.status == "ok" and res.stdout == "parent done\n"
    assert _procs_with(marker) == []


def test_background_job_holding_stdout_does_not_hang(backend):
    marker = "4343.25"
    res = backend.run(
        ExecRequest(f"(setsid sleep {marker} &) ; echo started", "bash", timeout_s=10)
    )
    assert res.status == "ok" and res.stdout == "started\n"
    assert _procs_with(marker) == []


def test_timeout_kills_whole_tree(backend):
    marker = "4444.5"
    code = f"""
import os, subprocess, time
subprocess.Popen(['sleep', '{marker}'], start_new_session=True)
while True: time.sleep(1)
"""
    res = backend.run(ExecRequest(code, timeout_s=1))
    assert res.status == "timeout"
    assert _procs_with(marker) == []


def test_runs_as_unprivileged_user(backend):
    res = backend.run(ExecRequest("import os; print(os.getuid(), os.geteuid())"))
    uid, euid = map(int, res.stdout.split())
    assert uid != 0 and euid != 0
