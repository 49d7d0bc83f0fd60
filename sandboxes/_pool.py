"""A pool of idle, reusable zygotes (warm pre-forked interpreters).

A zygote is a sandboxed interpreter that never runs untrusted code itself: each run is a
fresh fork in fresh namespaces, so reusing the zygote cannot leak state between runs. The
pool only saves the ~30 ms of starting one. ``prewarm`` starts that many in the background.

First in, first out, with ``spare`` more than are in use: after a run a zygote forks the next
run's init, which builds its namespaces and forks the program, all before a request arrives.
Handed straight back out (last in, first out, as many zygotes as workers), a zygote made the
next request wait for that; the one idle longest has it ready (HumanEval through the judge,
2 workers: 1.24x the throughput with 2 spares, same run, a loaded 2-core box).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Pool(Generic[T]):
    def __init__(
        self,
        spawn: Callable[[], T],
        destroy: Callable[[T], None],
        max_idle: int,
        prewarm: int = 0,
        spare: int = 2,
    ) -> None:
        self.spawn, self.destroy, self.max_idle = spawn, destroy, max_idle
        self.spare = min(spare, max_idle)
        self._idle: deque[T] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._starting = 0  # spares being started in the background
        self._gets = 0
        if prewarm > 0:
            self._starting = prewarm
            threading.Thread(target=self._prewarm, args=(prewarm,), daemon=True).start()

    def _prewarm(self, n: int) -> None:
        try:
            for _ in range(n):
                try:
                    self.put(self.spawn())
                except Exception:  # noqa: BLE001 - requests will cold-start and report errors
                    return
        finally:
            with self._lock:
                self._starting -= n

    def get(self) -> T:
        """The zygote idle longest, or a freshly started one; tops the spares up."""
        with self._lock:
            item = self._idle.popleft() if self._idle else None
            self._gets += 1  # spares from the second run on: a one-shot caller starts none
            missing = self.spare - len(self._idle) - self._starting
            missing = 0 if self._closed or self._gets < 2 else max(0, missing)
            self._starting += missing
        if missing:
            threading.Thread(target=self._prewarm, args=(missing,), daemon=True).start()
        return self.spawn() if item is None else item

    def idle(self) -> list[T]:
        """A snapshot of the idle items (benchmarks read their cgroups' CPU time)."""
        with self._lock:
            return list(self._idle)

    def put(self, item: T) -> None:
        """Return a healthy zygote; extras beyond ``max_idle`` (or after close) are destroyed."""
        with self._lock:
            if not self._closed and len(self._idle) < self.max_idle:
                self._idle.append(item)
                return
        self.destroy(item)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            items, self._idle = list(self._idle), deque()
        for item in items:
            self.destroy(item)
