"""A per-episode writable repository that persists across an agent's commands, on any backend.

Why the files live on the host: a workspace must survive many tool calls, reset in
milliseconds and never let one episode see another's files, on ``local`` and ``docker`` alike.
So the tree is an immutable *snapshot* (a dict of path -> bytes shared by every episode of a
task) plus a per-episode overlay of the files the agent changed (copy-on-write: reset drops the
overlay, O(1)). Each command runs in a fresh sandbox of the chosen backend with the whole tree
shipped in, exactly like any :class:`ExecRequest` (same limits: wall time, memory, pids, disk
quota, output caps, no network), and a small driver ships the changed files back. Isolation is
therefore the backend's (see ``local.py`` / ``docker_backend.py``); nothing runs on the host.

What persists between commands: files (edits, new files, deletions) and the working directory.
What does not: processes (a background job dies with its command's sandbox), shell variables,
and the effects of a command that overruns its time limit or the output cap (the whole command
is rolled back, and the observation says so). The driver that reports changed files runs as the
same unprivileged user as the command, so a command can lie about *its own* workspace, never
about anything else; grading (``agentrl.envs.swe``) never trusts the workspace's own report of
test results.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import secrets
import sys
from collections.abc import Mapping
from types import MappingProxyType

from .base import ExecRequest, ExecResult, SandboxBackend, get_backend

ROOT = "/work/repo"  # where the tree is, inside every backend's sandbox
_DRIVER = r"""
import base64, hashlib, json, os, signal, subprocess
cfg = json.loads(base64.b64decode(CFG))
root, cap = "/work/repo", cfg["cap"]
os.makedirs(os.path.join(root, cfg["cwd"]), exist_ok=True)  # folders persist only as cwd
os.chdir(os.path.join(root, cfg["cwd"]))
with open("/tmp/.cmd", "w") as f:
    f.write(cfg["command"] + '\n__rc=$?\nprintf "\\n%s" "$PWD" > /tmp/.pwd\nexit $__rc\n')
with open("/tmp/.out", "wb") as out:
    proc = subprocess.Popen(["bash", "/tmp/.cmd"], stdin=subprocess.DEVNULL, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(timeout=cfg["timeout"])
    except subprocess.TimeoutExpired:
        rc = None
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # background jobs die with their command
    except OSError:
        pass
    proc.wait()
size = os.path.getsize("/tmp/.out")
with open("/tmp/.out", "rb") as f:
    text = f.read(cap).decode("utf-8", "replace")
try:
    cwd = open("/tmp/.pwd").read().strip().splitlines()[-1]
except (OSError, IndexError):
    cwd = os.path.join(root, cfg["cwd"])
changed, seen = {}, set()
for d, dirs, files in os.walk(root):
    dirs[:] = [x for x in dirs if x not in ("__pycache__", ".pytest_cache")]
    for name in files:
        p = os.path.join(d, name)
        rel = os.path.relpath(p, root)
        if os.path.islink(p) or not os.path.isfile(p):
            continue
        seen.add(rel)
        data = open(p, "rb").read()
        if cfg["hashes"].get(rel) != hashlib.sha1(data).hexdigest():
            changed[rel] = base64.b64encode(data).decode()
deleted = [p for p in cfg["hashes"] if p not in seen]
rel_cwd = os.path.relpath(cwd, root) if (cwd + "/").startswith(root + "/") else "."
print(cfg["mark"] + json.dumps({"rc": rc, "out": text, "size": size, "cwd": rel_cwd,
                                "changed": changed, "deleted": deleted}))
"""


class Workspace:
    """One episode's copy of ``snapshot``; commands run in fresh sandboxes of ``backend``."""

    def __init__(
        self,
        snapshot: Mapping[str, bytes],
        backend: str | SandboxBackend = "local",
        timeout_s: float = 30.0,
        memory_mb: int = 1024,
        max_output_chars: int = 8000,
        env: Mapping[str, str] | None = None,
    ) -> None:
        for path in snapshot:
            _check_path(path)
        self.snapshot = MappingProxyType(dict(snapshot))
        self.backend = get_backend(backend)
        self.timeout_s, self.memory_mb, self.max_output_chars = (
            timeout_s,
            memory_mb,
            max_output_chars,
        )
        self.env = {**command_env(), **(env or {})}
        self._hashes = {p: _sha1(b) for p, b in self.snapshot.items()}
        self.reset()

    # --- files (host side: instant, no sandbox needed) ---------------------------------
    def reset(self) -> None:
        """Back to the snapshot: drop every change (copy-on-write, no copying)."""
        self._overlay: dict[str, bytes | None] = {}
        self.cwd = "."

    def files(self) -> dict[str, bytes]:
        """The current tree: the snapshot with this episode's changes applied."""
        tree = dict(self.snapshot)
        for path, data in self._overlay.items():
            if data is None:
                tree.pop(path, None)
            else:
                tree[path] = data
        return tree

    def changed(self) -> dict[str, bytes | None]:
        """Paths this episode changed: new bytes, or ``None`` for a deletion."""
        return dict(self._overlay)

    def read(self, path: str) -> bytes:
        path = self.resolve(path)
        data = self._overlay[path] if path in self._overlay else self.snapshot.get(path)
        if data is None:
            raise FileNotFoundError(path)
        return data

    def write(self, path: str, data: bytes) -> None:
        path = self.resolve(path)
        self._overlay[path] = None if data is None else bytes(data)
        if self.snapshot.get(path) == data:
            del self._overlay[path]

    def exists(self, path: str) -> bool:
        try:
            self.read(path)
        except FileNotFoundError:
            return False
        return True

    def resolve(self, path: str) -> str:
        """A workspace-relative path from an absolute (``/work/repo/...``) or cwd-relative one."""
        if path.startswith(f"{ROOT}/") or path == ROOT:
            path = path[len(ROOT) :].lstrip("/")
        elif path.startswith("/"):
            raise ValueError(f"{path!r} is outside the workspace ({ROOT})")
        else:
            path = posixpath.join(self.cwd, path)
        norm = posixpath.normpath(path)
        _check_path(norm)
        return norm

    # --- commands (in a fresh sandbox each) --------------------------------------------
    def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """Run ``command`` with bash in ``/work/repo/<cwd>``; file changes and cwd persist."""
        timeout = float(timeout_s if timeout_s is not None else self.timeout_s)
        tree = self.files()
        mark = "\x1e" + secrets.token_hex(8) + ":"
        cfg = {
            "command": command,
            "cwd": self.cwd,
            "timeout": timeout,
            "cap": self.max_output_chars * 4,
            "hashes": {p: _sha1(b) for p, b in tree.items()},
            "mark": mark,
        }
        code = f"CFG = {base64.b64encode(json.dumps(cfg).encode()).decode()!r}\n" + _DRIVER
        req = ExecRequest(
            code,
            files={f"repo/{p}": b for p, b in tree.items()},
            timeout_s=timeout + 15.0,  # the driver's own walk and report, after the command
            memory_mb=self.memory_mb,
            max_output_bytes=len(json.dumps(cfg)) + 2 * sum(map(len, tree.values())) + (4 << 20),
            env=self.env,
        )
        res = self.backend.run(req)
        return self._absorb(res, mark, timeout)

    async def arun(self, command: str, timeout_s: float | None = None) -> CommandResult:
        import asyncio

        return await asyncio.to_thread(self.run, command, timeout_s)

    def _absorb(self, res: ExecResult, mark: str, timeout: float) -> CommandResult:
        head, sep, tail = res.stdout.rpartition(mark)
        if not sep or res.status not in ("ok", "error"):
            why = {"timeout": f"timed out after {timeout:g} s", "memory": "ran out of memory"}
            note = why.get(res.status, f"sandbox ended the command ({res.status})")
            text = head[-self.max_output_chars :]  # no mark: stdout is a cut driver report
            return CommandResult(None, text, f"[{note}; its changes were rolled back]", False)
        report = json.loads(tail.splitlines()[0])
        for path, b64 in report["changed"].items():  # root-relative, not cwd-relative
            self.write(f"{ROOT}/{path}", base64.b64decode(b64))
        for path in report["deleted"]:
            self.write(f"{ROOT}/{path}", None)  # type: ignore[arg-type]
        cwd = posixpath.normpath(report["cwd"])
        self.cwd = cwd if cwd != ".." and not cwd.startswith(("../", "/")) else "."
        text, note = report["out"], ""
        if report["rc"] is None:
            note = f"[command timed out after {timeout:g} s and was killed]"
        if len(text) > self.max_output_chars or report["size"] > len(text.encode()):
            keep = self.max_output_chars // 2
            cut = report["size"] - 2 * keep
            text = text[:keep] + f"\n[... {max(cut, 0)} bytes of output cut ...]\n" + text[-keep:]
        return CommandResult(report["rc"], text, note, True)


class CommandResult:
    """What one command did: exit code (``None`` when killed), output (truncated), a note."""

    __slots__ = ("exit_code", "output", "note", "applied")

    def __init__(self, exit_code: int | None, output: str, note: str, applied: bool) -> None:
        self.exit_code, self.output, self.note, self.applied = exit_code, output, note, applied

    def render(self) -> str:
        parts = [self.output.rstrip("\n")] if self.output.strip() else []
        if self.note:
            parts.append(self.note)
        if self.exit_code not in (0, None):
            parts.append(f"[exit code {self.exit_code}]")
        return "\n".join(parts) or "[no output]"


def command_env() -> dict[str, str]:
    """PATH with this interpreter's ``python`` first (its prefix is bound into every sandbox)."""
    exe = sys.executable
    bins = dict.fromkeys(os.path.dirname(p) for p in (exe, os.path.realpath(exe)))
    return {"PATH": ":".join([*bins, "/usr/local/bin", "/usr/bin", "/bin"]), "HOME": "/work"}


def _check_path(path: str) -> None:
    if not path or path.startswith("/") or path == ".." or path.startswith("../"):
        raise ValueError(f"workspace paths must stay inside the workspace: {path!r}")


def _sha1(data: bytes) -> str:
    import hashlib

    return hashlib.sha1(data).hexdigest()
