"""A pool of idle, reusable zygotes (warm pre-forked interpreters).

A zygote is a sandboxed interpreter that never runs untrusted code itself: each run is a
fresh fork in fresh namespaces, so reusing the zygote cannot leak state between runs. The
pool only saves the ~30 ms of starting one. ``prewarm`` starts that many in the background.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Pool(Generic[T]):
    def __init__(
        self, spawn: Callable[[], T], destroy: Callable[[T], None], max_idle: int, prewarm: int = 0
    ) -> None:
        self.spawn, self.destroy, self.max_idle = spawn, destroy, max_idle
        self._idle: list[T] = []
        self._lock = threading.Lock()
        self._closed = False
        if prewarm > 0:
            threading.Thread(target=self._prewarm, args=(prewarm,), daemon=True).start()

    def _prewarm(self, n: int) -> None:
        for _ in range(n):
            try:
                self.put(self.spawn())
            except Exception:  # noqa: BLE001 - requests will cold-start and report errors
                return

    def get(self) -> T:
        """An idle zygote, or a freshly started one."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self.spawn()

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
            items, self._idle = self._idle, []
        for item in items:
            self.destroy(item)
