"""Warm containers for the docker backend: created, attached and started ahead of need.

Why: creating and starting a container costs ~0.3 s, most of a short code-reward run. A
background thread keeps `size` containers started with the runner waiting on stdin for its
request. Each serves exactly one run and is then removed, as a fresh container would be, so
nothing is shared between runs: warming only moves the start-up off the critical path.

A container's memory limit is fixed at creation, so warm containers are made for one
`memory_mb` (the default request's); a request asking for another limit gets a fresh one.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REFILL_BACKOFF_S = 2.0  # after a docker error, before trying again


@dataclass
class Launched:
    """A started container whose runner waits for its request on the attach socket."""

    box: Any
    conn: Any
    sock: Any
    memory_mb: int

    def hangup(self) -> None:
        """Close the attach stream (shut down first, so the engine's stream copy stops and a
        following kill does not stall on it)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for close in (self.sock.close, self.conn.close):
            try:
                close()
            except Exception:  # noqa: BLE001 - already closed
                pass

    def discard(self) -> None:
        """Hang up and remove the container (whatever state it is in)."""
        self.hangup()
        try:
            self.box.remove(force=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


class WarmContainers:
    """Keeps up to `size` launched containers ready; `take` never waits for docker."""

    def __init__(
        self,
        launch: Callable[[int], Launched],
        size: int,
        memory_mb: int,
        max_launches: int | None = None,
    ) -> None:
        """`max_launches`: start at most this many in total (a one-shot CLI call wants one)."""
        self._launch, self.size, self.memory_mb = launch, size, memory_mb
        self._left = max_launches
        self._ready: queue.Queue[Launched] = queue.Queue()
        self._wake = threading.Event()
        self._closed = threading.Event()
        self.errors = 0
        self._thread = threading.Thread(target=self._fill, name="docker-warm", daemon=True)
        self._thread.start()

    def take(self, memory_mb: int, wait_s: float = 0.0) -> Launched | None:
        """A warm container for `memory_mb` (waiting up to `wait_s` for one being started),
        or None (then the caller launches one)."""
        if memory_mb != self.memory_mb:
            return None
        try:
            got = self._ready.get(timeout=wait_s) if wait_s > 0 else self._ready.get_nowait()
        except queue.Empty:
            return None
        finally:
            self._wake.set()
        return got

    def _fill(self) -> None:
        while not self._closed.is_set():
            if self._left is not None and self._left <= 0:
                return
            if self._ready.qsize() >= self.size:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                continue
            try:
                launched = self._launch(self.memory_mb)
            except Exception:  # noqa: BLE001 - the engine is down or busy: retry later
                self.errors += 1
                self._closed.wait(REFILL_BACKOFF_S)
                continue
            if self._closed.is_set():
                launched.discard()
                return
            if self._left is not None:
                self._left -= 1
            self._ready.put(launched)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop refilling and remove every warm container."""
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=timeout_s)
        while True:
            try:
                self._ready.get_nowait().discard()
            except queue.Empty:
                return
