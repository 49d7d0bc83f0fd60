"""The zygote pool (``sandboxes/_pool.py``): first in, first out, with spares.

Why: after a run a zygote forks the next run's init, which builds namespaces and forks the
program before any request arrives; handing the just-returned zygote straight back out made
the next request wait for all that. The pool itself is generic, so it is checked with plain
objects; the sandbox tests run it with real zygotes.
"""

from __future__ import annotations

import itertools
import threading
import time

from agentrl.sandboxes._pool import Pool


def _pool(spare: int = 2, max_idle: int = 8) -> tuple[Pool[int], list[int]]:
    made: list[int] = []
    counter = itertools.count()
    lock = threading.Lock()

    def spawn() -> int:
        with lock:
            made.append(next(counter))
            return made[-1]

    return Pool(spawn, lambda item: None, max_idle, spare=spare), made


def _settle(pool: Pool[int]) -> None:
    deadline = time.monotonic() + 10
    while pool._starting and time.monotonic() < deadline:
        time.sleep(0.01)


def test_one_shot_use_starts_no_spares():
    pool, made = _pool()
    pool.put(pool.get())
    _settle(pool)
    assert made == [0]


def test_spares_then_longest_idle_first():
    pool, made = _pool(spare=2)
    first = pool.get()
    pool.put(first)
    pool.put(pool.get())  # second use: two spares are started
    _settle(pool)
    assert len(made) == 3 and len(pool._idle) == 3
    order = list(pool._idle)
    assert pool.get() == order[0]  # the one idle longest


def test_spares_respect_max_idle_and_close():
    pool, made = _pool(spare=5, max_idle=1)
    pool.put(pool.get())
    pool.put(pool.get())
    _settle(pool)
    assert len(pool._idle) <= 1
    pool.close()
    pool.get()
    pool.get()
    _settle(pool)
    assert len(pool._idle) == 0
