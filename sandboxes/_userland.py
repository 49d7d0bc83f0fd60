"""The docker backend's ``image_userland`` mode: the image's own ``/usr``, the host's runner.

Why: the runner inside a container is the *host's* Python (no interpreter is assumed in the
image), so by default the docker backend binds the host's ``/usr`` (and the interpreter's
prefix) over the image's, at the same paths. That hides whatever an image installed there
(``RUN apt-get``, ``COPY tool /usr/local/bin``): a Harbor task's own tools were gone.

In this mode every host folder the runner needs is bound read-only under ``HOST`` instead
(``/usr`` -> ``/.agentrl-host/usr``, a pyenv prefix -> ``/.agentrl-host/root/.pyenv/...``),
so ``/usr``, ``/bin``, ``/lib``, ``/etc`` are the image's, and the runner is started through
the host's own dynamic loader, named explicitly: ``<HOST loader> --inhibit-cache
--library-path <HOST lib dirs> <HOST python> ...``. The loader flags hold only for that one
process (and its ``dlopen``s: extension modules, ``ctypes``), not for what it executes: no
``LD_LIBRARY_PATH`` is set, so ``bash`` and the task's tools run on the image's own loader and
libraries. ``--inhibit-cache`` because ``/etc/ld.so.cache`` is the image's (its paths are the
image's libraries). The library path lists the interpreter's own ``lib`` folders first (they
stand in for its ``RUNPATH``, an absolute host path that is not there: a system
``libpython`` of another build must not win), then the system's default folders, then those
of the other libraries this process has mapped (inside the binds: they add none).

What the program sees of the host is what the default mode shows, moved: the same folders,
read-only, with the same ``hidden_paths`` masked by tmpfs (at their moved paths); only on a
host whose ``/lib`` is not under ``/usr`` its library folders are added (the default mode
does not run there: its runner would load the image's libc).
``sys.executable`` inside is the moved host interpreter: executing it from the program needs
the host loader, so a task's ``python`` is the image's own (its ``PATH``).
"""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass

HOST = "/.agentrl-host"
_PT_INTERP = 3


def elf_interpreter(path: str) -> str:
    """The ``PT_INTERP`` program header (the dynamic loader) of the ELF executable `path`."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            raise ValueError(f"{path}: not a 64-bit ELF executable")
        order = "<" if head[5] == 1 else ">"
        (phoff,) = struct.unpack_from(order + "Q", head, 32)
        phentsize, phnum = struct.unpack_from(order + "HH", head, 54)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            p_type, _, offset, _, _, size = struct.unpack(order + "IIQQQQ", f.read(40))
            if p_type == _PT_INTERP:
                f.seek(offset)
                return f.read(size).rstrip(b"\0").decode()
    raise ValueError(f"{path}: no program interpreter (a static executable?)")


def _mapped_lib_dirs() -> list[str]:
    """Folders of the shared libraries this process has mapped (libc, libffi, libpython...;
    not of extension modules: nothing links against those by name)."""
    dirs: dict[str, None] = {}
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split(None, 5)[-1].strip()
            name = os.path.basename(path)
            if path.startswith("/") and name.startswith(("lib", "ld-")) and ".so" in name:
                dirs[os.path.dirname(os.path.realpath(path))] = None
    return list(dirs)


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@dataclass(frozen=True)
class HostRuntime:
    """Host folders to bind under ``HOST`` and the command prefix that starts the runner."""

    binds: list[str]  # host paths, each bound read-only at HOST + path
    argv: list[str]  # loader, its flags and the interpreter, all at their HOST paths
    site_dirs: str  # ``:``-joined, at their HOST paths

    def hidden(self, paths: list[str]) -> list[str]:
        """``hidden_paths`` of the binds, at the paths they have inside the container."""
        return [HOST + p for p in paths]


def host_runtime(python: str, python_dirs: list[str], site_dirs: list[str]) -> HostRuntime:
    """What to bind and run so the host interpreter `python` (its real path) runs as the
    container's runner with none of the host at its usual paths."""
    python = os.path.realpath(python)
    loader = os.path.realpath(elf_interpreter(python))
    own = [os.path.join(d, "lib") for d in python_dirs]
    arch = sys.implementation._multiarch  # type: ignore[attr-defined]  # e.g. x86_64-linux-gnu
    system = [f"/lib/{arch}", f"/usr/lib/{arch}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"]
    binds = sorted({*python_dirs, "/usr"})
    for d in (os.path.dirname(loader), os.path.dirname(python), *system):
        d = os.path.realpath(d)
        if os.path.isdir(d) and not _under(d, binds):  # e.g. a non-merged /lib/x86_64-linux-gnu
            binds.append(d)
    libs: dict[str, None] = {}
    for d in [*own, *system, *_mapped_lib_dirs()]:  # a mapped library elsewhere adds no bind
        d = os.path.realpath(d)
        if os.path.isdir(d) and _under(d, binds):
            libs[d] = None
    argv = [HOST + loader, "--inhibit-cache", "--library-path", ":".join(HOST + d for d in libs)]
    return HostRuntime(
        binds,
        [*argv, HOST + python],
        ":".join(HOST + os.path.realpath(d) for d in site_dirs if d),
    )
