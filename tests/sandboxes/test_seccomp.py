"""The local backend's seccomp denylist: namespace creation, io_uring, eBPF, perf events,
userfaultfd, the keyring and ptrace fail inside the sandbox; ordinary programs (threads,
subprocesses, bash) still work. Real syscalls from real sandboxed code (x86-64 numbers)."""

from __future__ import annotations

import platform

import pytest

from agentrl.sandboxes import ExecRequest
from agentrl.sandboxes._seccomp import denylist_bpf

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="syscall numbers are x86-64"),
    pytest.mark.skipif(denylist_bpf() is None, reason="libseccomp not available"),
]

PROBE = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(nr, *args)
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print("unshare_user", call(272, 0x10000000))
print("unshare_net", call(272, 0x40000000))
print("clone_newuser", call(56, 0x10000000 | 17, 0, 0, 0, 0))
print("clone3", call(435, 0, 0))
print("io_uring_setup", call(425, 1, 0))
print("bpf", call(321, 0, 0, 0))
print("perf_event_open", call(298, 0, 0, -1, -1, 0))
print("userfaultfd", call(323, 0))
print("keyctl", call(250, 0, 0, 0, 0, 0))
print("ptrace", call(101, 0, 0, 0, 0))
print("mount", call(165, 0, 0, 0, 0, 0))
"""


def test_denied_syscalls_fail_with_eperm(local) -> None:
    res = local.run(ExecRequest(PROBE, timeout_s=20))
    assert res.status == "ok", res.stderr
    got = dict(line.split() for line in res.stdout.splitlines())
    assert got.pop("clone3") == "ENOSYS"  # glibc then falls back to clone
    assert got == dict.fromkeys(got, "EPERM"), got


def test_threads_subprocesses_and_bash_still_work(local) -> None:
    code = (
        "import threading, subprocess\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(sum(range(10))))\n"
        "t.start(); t.join()\n"
        "print(out[0], subprocess.run(['/bin/echo', 'hi'], capture_output=True, text=True)"
        ".stdout.strip())\n"
    )
    res = local.run(ExecRequest(code, timeout_s=20))
    assert (res.status, res.stdout.strip()) == ("ok", "45 hi"), res.stderr
    res = local.run(ExecRequest("echo $(( 6 * 7 )) | cat", language="bash", timeout_s=20))
    assert (res.status, res.stdout.strip()) == ("ok", "42"), res.stderr


def test_interpreter_sessions_are_filtered_too(local) -> None:
    from agentrl.sandboxes.interpreter import PythonSession

    with PythonSession() as s:
        res = s.execute(PROBE)
    assert "unshare_user EPERM" in res.stdout, res.stdout + res.stderr


def test_missing_libseccomp_means_unfiltered_with_a_reason(monkeypatch) -> None:
    """pyseccomp raises RuntimeError at import when libseccomp.so is absent: the backend
    must then run unfiltered and say why, not crash."""
    import builtins
    import sys

    from agentrl.sandboxes import _seccomp

    real_import = builtins.__import__

    def no_libseccomp(name, *args, **kwargs):
        if name == "pyseccomp":
            raise RuntimeError("Unable to find libseccomp")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "pyseccomp", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_libseccomp)
    _seccomp.denylist_bpf.cache_clear()
    try:
        assert _seccomp.denylist_bpf() is None
        assert "libseccomp" in (_seccomp.reason() or "")
    finally:
        monkeypatch.undo()
        _seccomp.denylist_bpf.cache_clear()
    assert _seccomp.denylist_bpf() is not None


MORE = r"""
import ctypes, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    r = libc.syscall(nr, *args)
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print("kcmp", call(312, 1, 1, 0, 0, 0))
print("modify_ldt", call(154, 0, 0, 0))
print("landlock_create_ruleset", call(444, 0, 0, 1))
print("landlock_add_rule", call(445, 0, 0, 0, 0))
print("landlock_restrict_self", call(446, 0, 0))
try:
    socket.socket(40, socket.SOCK_STREAM)
    print("af_vsock ok")
except OSError as e:
    print("af_vsock", errno.errorcode[e.errno])
"""


def test_vsock_kcmp_ldt_landlock_are_denied(backend) -> None:
    res = backend.run(ExecRequest(MORE, timeout_s=20))
    assert res.status == "ok", res.stderr
    got = dict(line.split() for line in res.stdout.splitlines())
    assert got == dict.fromkeys(got, "EPERM"), got
