"""Calls answered by another process, by request id: the futures a reader thread resolves.

Why: the rollout child (`process_rollout`) and the Ray rollout actor (`ray_proxies`) both
hand out futures now and learn later, from a reply stream, which request finished how; and
both must fail every open call at once when the other side dies. One table does that.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from agentrl.engines.base import EngineError


class FutureTable:
    """Open calls by id. `where` prefixes the errors (e.g. "rollout process")."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._lock = threading.Lock()
        self._open: dict[int, concurrent.futures.Future[Any]] = {}

    def add(self, rid: int) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            self._open[rid] = fut
        return fut

    def resolve(self, rid: int, ok: bool, payload: Any) -> None:
        """The reply to `rid`: its result, or (not ok) an `EngineError` carrying `payload`;
        ignored when the call was cancelled or already failed."""
        with self._lock:
            fut = self._open.pop(rid, None)
        if fut is None or fut.done():
            return
        if ok:
            fut.set_result(payload)
        else:
            fut.set_exception(EngineError(f"{self.where}: {payload}"))

    def fail_all(self, why: str) -> None:
        """Every open call fails with `why` (the other side died or was closed)."""
        with self._lock:
            futures, self._open = list(self._open.values()), {}
        for fut in futures:
            if not fut.done():
                fut.set_exception(EngineError(why))
