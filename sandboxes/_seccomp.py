"""A seccomp filter for untrusted code in the ``local`` backend: kernel attack surface off.

Why: the program already runs with no capabilities, as an unused unprivileged uid, in private
namespaces, so the syscalls below mostly fail anyway for lack of privilege. What remains
reachable without privilege is kernel code that has been the entry point of many local
privilege escalations: creating user (and other) namespaces, io_uring, unprivileged eBPF,
perf events, userfaultfd, the keyring, ptrace, kcmp, modify_ldt, landlock, and AF_VSOCK
sockets (vsock reaches the hypervisor and is not covered by a network namespace). The filter makes them fail with an errno before
any of that code runs. It is a denylist (everything else allowed), so ordinary programs,
threads and subprocesses are unaffected: ``clone3`` returns ENOSYS, on which glibc falls back
to ``clone``, whose namespace flags are filtered by argument.

The BPF program is compiled on the host by libseccomp (through ``pyseccomp``, a ctypes
binding) and handed to the in-sandbox runner, which installs it with ``prctl`` right before
running the code (``_runner._install_seccomp``); ``execve`` keeps it. Without libseccomp the
backend runs unfiltered and says so (``reason()``).
"""

from __future__ import annotations

import errno
import tempfile
from functools import cache

# Fail with EPERM: namespaces, mounts, module/kexec/reboot-class calls, and the unprivileged
# kernel surfaces named above.
DENIED = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsmount",
    "fsconfig", "move_mount", "open_tree", "mount_setattr", "ptrace", "process_vm_readv",
    "process_vm_writev", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
    "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon", "swapoff",
    "reboot", "acct", "quotactl", "syslog", "open_by_handle_at", "name_to_handle_at",
    "lookup_dcookie", "vhangup", "kcmp", "modify_ldt", "landlock_create_ruleset",
    "landlock_add_rule", "landlock_restrict_self",
)  # fmt: skip
# Socket families the private network namespace does not cover: AF_VSOCK talks to the
# hypervisor/host (vsock is not namespaced).
DENIED_FAMILIES = (40,)  # AF_VSOCK
# clone(2) flags that create namespaces (arg 0 on x86-64 and aarch64).
NAMESPACE_FLAGS = (
    0x00000080,  # CLONE_NEWTIME
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)

_REASON: list[str] = []


@cache
def denylist_bpf() -> bytes | None:
    """The compiled filter (raw `struct sock_filter` array), or None without libseccomp."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError) as exc:  # binding or libseccomp.so missing
        _REASON.append(f"no libseccomp ({exc}); install libseccomp2 and pyseccomp")
        return None
    f = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in DENIED:
        try:
            f.add_rule(sc.ERRNO(errno.EPERM), name)
        except (RuntimeError, ValueError, OSError):  # not a syscall on this architecture
            continue
    for family in DENIED_FAMILIES:
        for call in ("socket", "socketpair"):
            f.add_rule(sc.ERRNO(errno.EPERM), call, sc.Arg(0, sc.EQ, family))
    for flag in NAMESPACE_FLAGS:
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    try:
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")  # its flags sit behind a pointer
    except (RuntimeError, ValueError, OSError):
        pass
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def reason() -> str | None:
    """Why the filter is unavailable, or None when `denylist_bpf()` returns one."""
    return None if denylist_bpf() is not None else (_REASON or ["unknown"])[-1]
