"""The episode clock: an episode's own time, not the time it waited for an engine slot.

Why: `rollout.episode_timeout_s` bounds what an episode does (generation while admitted, env,
tool and reward time). A fixed `asyncio.wait_for` around the whole episode also counted the
time a `generate` request waited in the engine's queue behind other episodes (more requests
than `engine.max_batch_size` slots), so on a loaded engine short episodes timed out. An engine
that reports admission (the "admission" feature: `SamplingParams.on_admit`, the in-process hf
engines) lets the episode stop its clock from `queue()` (the request is sent) until `admit()`
(the engine gave it a slot). Engines that cannot report it (vllm, sglang, remote) never call
`admit()`, so the episode never calls `queue()` and their queue time counts, as before.

Nothing runs forever: whatever the queue, an episode ends as `timeout` once its wall time,
queue included, reaches `rollout.episode_wall_factor` times the timeout (a wedged engine that
never admits).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class EpisodeTimeout(asyncio.TimeoutError):
    """The episode ran out of its own time, or of the outer wall-clock bound; says which."""


class EpisodeClock:
    """Counts an episode's own seconds: wall time minus the time between `queue()` and
    `admit()`. `run(coro)` cancels `coro` and raises `EpisodeTimeout` when the own time
    reaches `timeout_s` or the wall time reaches `wall_factor * timeout_s`."""

    def __init__(self, timeout_s: float, *, wall_factor: float) -> None:
        if not (timeout_s > 0 and wall_factor >= 1):
            raise ValueError(f"need timeout_s > 0 and wall_factor >= 1: {timeout_s}, {wall_factor}")
        self.timeout_s, self.wall_factor = float(timeout_s), float(wall_factor)
        self.outer_s = self.timeout_s * self.wall_factor
        self._t0 = time.monotonic()
        self._queued = 0.0  # seconds queued in finished waits
        self._since: float | None = None  # queued since (monotonic), None when not queued
        self._changed: asyncio.Event | None = None  # set on queue/admit: `run` re-plans

    def queue(self) -> None:
        """A request was sent to an engine that will call `admit()`: the clock stops."""
        if self._since is None:
            self._since = time.monotonic()
            self._poke()

    def admit(self) -> None:
        """The engine admitted the request (or it ended unadmitted): the clock runs again.
        Idempotent; called on the event loop that runs the episode."""
        if self._since is not None:
            self._queued += time.monotonic() - self._since
            self._since = None
            self._poke()

    @property
    def queued_s(self) -> float:
        """Seconds spent queued so far, a wait still under way included."""
        now = time.monotonic()
        return self._queued + (now - self._since if self._since is not None else 0.0)

    def wall_s(self) -> float:
        return time.monotonic() - self._t0

    def own_s(self) -> float:
        return self.wall_s() - self.queued_s

    def _poke(self) -> None:
        if self._changed is not None:
            self._changed.set()

    def _left(self) -> tuple[float, str]:
        """Seconds until the next bound could be reached, and the message it would give."""
        outer = self.outer_s - self.wall_s()
        own = math.inf if self._since is not None else self.timeout_s - self.own_s()
        if own <= outer:
            return own, f"episode exceeded {self.timeout_s:g}s (its own time, queue excluded)"
        return outer, (
            f"episode exceeded {self.outer_s:g}s wall time, queue included "
            f"(rollout.episode_wall_factor {self.wall_factor:g} x the {self.timeout_s:g}s timeout; "
            f"{self.queued_s:.1f}s queued for the engine)"
        )

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` under the clock; on a bound, cancel it and raise `EpisodeTimeout`."""
        self._changed = changed = asyncio.Event()
        task = asyncio.ensure_future(coro)
        try:
            while True:
                changed.clear()
                left, why = self._left()
                if left <= 0:
                    break
                poke = asyncio.ensure_future(changed.wait())
                try:
                    await asyncio.wait(
                        {task, poke}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    poke.cancel()
                if task.done():
                    return task.result()
        finally:
            if not task.done():  # a bound, or the caller was cancelled
                task.cancel()
                await asyncio.wait({task})
            if not task.cancelled():
                task.exception()  # retrieved: a late exception is the bound's, not news
        raise EpisodeTimeout(why)
