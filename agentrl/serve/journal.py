"""Append-only trajectory file for `agentrl serve --out`: nothing finished is lost on a crash.

Each time a request finishes (or a session is rewarded) the segment it touched is appended
as one JSONL line with a single `os.write` on an `O_APPEND` descriptor, so the line is in the
kernel's page cache before the response is sent: a `kill -9` of the server loses no finished
request (a power loss can still lose what the OS had not written back; `fsync=True` closes
that at a cost per request). A segment that grows is appended again; every line carries
`metadata["snapshot"]`, and `agentrl.types.read_jsonl` keeps the newest line of each
snapshot, so readers (`agentrl view`, training code) see each segment once. A clean shutdown
`compact()`s the file to exactly those lines.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.types import Trajectory, read_jsonl, write_jsonl


class Journal:
    def __init__(self, path: str | Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lines = 0

    def append(self, traj: Trajectory) -> None:
        data = (traj.to_json() + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        if self.fsync:
            os.fsync(self._fd)
        self.lines += 1

    def compact(self) -> int:
        """Rewrite the file with one line per segment (atomically); returns the count."""
        trajs = list(read_jsonl(self.path))
        tmp = self.path.with_name(self.path.name + ".tmp")
        n = write_jsonl(tmp, trajs)
        os.replace(tmp, self.path)
        return n

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
