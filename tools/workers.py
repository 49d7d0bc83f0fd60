"""Daemon worker threads for sync code that may hang past its timeout: sync tools
(`ToolSet.call`) and an env's sync hooks (`reset`, `step`, `score`; envs/core.py).

Why not `asyncio.to_thread`: its executor's threads are not daemons, so a call that hangs
past its timeout keeps the interpreter from exiting, and a few hung calls use up its small
pool. Here a hung call keeps only its own worker, and nothing waits for it at exit.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
from collections.abc import Callable
from typing import Any


def in_daemon_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """`fn(*args, **kwargs)` on a daemon worker thread, for sync code that may hang past its
    timeout (a tool, an env's `score`): it can neither block the event loop nor keep the
    interpreter from exiting (asyncio.to_thread would do both). Like `to_thread`, the call
    sees the caller's context variables (tracing spans, logging context)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            (fut.set_result if ok else fut.set_exception)(value)

    def job() -> Callable[[], None]:
        try:
            value, ok = context.run(fn, *args, **kwargs), True
        except StopIteration as e:  # a future cannot hold one (asyncio raises TypeError)
            value, ok = RuntimeError(f"{getattr(fn, '__name__', fn)} raised StopIteration"), False
            value.__cause__ = e
        except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
            value, ok = e, False

        def deliver() -> None:
            try:
                loop.call_soon_threadsafe(settle, ok, value)
            except RuntimeError:  # loop closed after a timeout: nobody is waiting any more
                pass

        return deliver

    _WORKERS.submit(job)
    return fut


class _DaemonWorkers:
    """Daemon threads that run sync tool calls, kept for the next call.

    Why not a thread per call: `Thread.start()` waits until the new thread runs, which needs
    the interpreter lock; beside a pipelined update's thread (`trainer.async`) that wait held
    the rollout's event loop for 14% of its time (H200, `bench.stack_sample`, session 10;
    `benchmarks/diagnostics/tool_threads.py`). Why not a bounded pool: a hung tool keeps its worker
    forever, and a call must never queue behind it. So each call is promised an idle worker
    or starts a new one with the call as its first job: the queue never holds more calls than
    idle workers. A worker counts itself idle before it hands its result over, so a caller's
    next call finds it. Workers are never reaped: a burst of N concurrent calls leaves N.
    A sync tool's thread-local state may outlive its call (the worker runs later calls)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], Callable[[], None]]] = queue.SimpleQueue()
        self._idle = 0
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], Callable[[], None]]) -> None:
        """`job()` runs the call and returns what delivers its result."""
        with self._lock:
            promised = self._idle > 0
            if promised:
                self._idle -= 1
        if promised:
            self._jobs.put(job)
        else:  # if start() fails, the caller sees the error and nothing was queued
            threading.Thread(
                target=self._work, args=(job,), daemon=True, name="agentrl-tool"
            ).start()

    def _work(self, job: Callable[[], Callable[[], None]]) -> None:
        while True:
            deliver = job()  # never raises: the call's own errors are its result
            with self._lock:
                self._idle += 1
            deliver()
            job = self._jobs.get()


_WORKERS = _DaemonWorkers()


def _reset_workers_after_fork() -> None:
    """A forked child has none of the parent's threads: its idle count must start at 0, or
    a call would be promised to a worker that does not exist and wait out its timeout."""
    global _WORKERS
    _WORKERS = _DaemonWorkers()


os.register_at_fork(after_in_child=_reset_workers_after_fork)
