"""Where each thread of this process spends its wall time: a sampling profiler in Python.

Why: session 9's trace showed the pipelined step's device idle 44% of the time with the
interpreter lock contended, but not which thread's Python held the host. py-spy needs ptrace,
which the device host's sandbox may refuse, so this samples `sys._current_frames()` from a
thread every `period` s. A thread blocked in C (a graph replay, a host sync, waiting for the
lock) shows at the Python frame that called it, as py-spy's `--idle` does. The sampler takes
the lock itself each tick (~0.1 ms per tick here), so it perturbs what it measures a little.

Per thread (by name, numbered threads of a pool merged): the share of samples whose innermost
agentrl/benchmark frame is each `file:function:line`, and the innermost frame of any code.
"""

from __future__ import annotations

import collections
import re
import sys
import threading
from typing import Any

from _gpu_update_diag import ThreadedProbe

OURS = ("/agentrl/", "/benchmarks/", "/envs/", "/tools/")


class StackSampler(ThreadedProbe):
    def __init__(self, period: float = 0.003, top: int = 15) -> None:
        self.period, self.top = period, top
        self.ours: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.leaf: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )
        self.samples = 0
        super().__init__("stack-sampler")

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.period):
            names = {t.ident: _thread_name(t.name) for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                name = names.get(ident, f"thread-{ident}")
                self.leaf[name][_where(frame)] += 1
                f: Any = frame
                while f is not None and not any(p in f.f_code.co_filename for p in OURS):
                    f = f.f_back
                self.ours[name][_where(f) if f is not None else "(no agentrl frame)"] += 1
            self.samples += 1

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": self.samples, "period_s": self.period, "threads": {}}
        for name, counts in self.ours.items():
            n = sum(counts.values())
            out["threads"][name] = {
                "samples": n,
                "ours": {k: round(v / n, 4) for k, v in counts.most_common(self.top)},
                "leaf": {k: round(v / n, 4) for k, v in self.leaf[name].most_common(self.top)},
            }
        return out


def _thread_name(name: str) -> str:
    return re.sub(r"_\d+$", "", re.sub(r"-\d+( \(.*\))?$", "", name))


def _where(frame: Any) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in OURS:
        if marker in path:
            path = marker.strip("/") + "/" + path.split(marker, 1)[1]
            break
    else:
        path = path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1] if "/" in path else path
    return f"{path}:{code.co_name}:{frame.f_lineno}"
