"""When Python's cyclic garbage collector does its full passes during training
(`trainer.gc_every`).

Why: a compiled model leaves hundreds of thousands of long-lived Python objects behind
(dynamo's and inductor's caches, graph modules, guards), and every full collection (of the
oldest generation) walks all of them. Python starts one whenever enough new objects have
survived, that is at a random point inside a step, and it holds the interpreter lock
throughout, so a pipelined step's rollout thread stops too. On the H200 one update of 80
took 582 ms instead of 125 ms, 467 ms of it in one collection (BENCHMARKS.md, session 11);
torchtitan schedules its collections for the same reason.

What this does, between steps: at the end of the first step (the compiles are done by
then) it collects the young generations and freezes everything (`gc.freeze`): the objects
move to the permanent generation, which the automatic collections skip. Every `gc_every`
steps after that it unfreezes, runs one full collection and freezes the survivors. So the
automatic passes inside a step only walk what was created since the last boundary, and
garbage among frozen objects is found by the next full boundary: nothing is held longer
than `gc_every` steps (or the run, if shorter). The first boundary skips the full walk
(0.3-0.5 s for a small run's heap, seconds in a long-lived process such as a test
session); freezing is two list splices. Unlike disabling the collector, reference cycles
are still collected (the automatic passes keep running). 0 leaves Python's collector
alone. `close` unfreezes (the trainer calls it when the run ends, so a process that trains
twice, such as a test session, frees the first run's objects).
"""

from __future__ import annotations

import gc
import time


class GcSchedule:
    """Full collections at step boundaries, the survivors frozen in between."""

    def __init__(self, every: int) -> None:
        if every < 0:
            raise ValueError(f"trainer.gc_every must be >= 0, got {every}")
        self.every = every
        self.frozen = False

    def due(self, step: int) -> bool:
        """Whether the boundary after `step` (1-based) does anything: the first freeze, or a
        full collection."""
        return self.every > 0 and (step == 1 or step % self.every == 0)

    def after_step(self, step: int) -> float | None:
        """At the boundary after `step`: the seconds its work took when it was due, else
        None (nothing done)."""
        if not self.due(step):
            return None
        t = time.perf_counter()
        if self.frozen:  # a later boundary: everything is walked once
            gc.unfreeze()
            gc.collect()
        else:  # the first: only the young generations (see the module docstring)
            gc.collect(1)
        gc.freeze()
        self.frozen = True
        return time.perf_counter() - t

    def close(self) -> None:
        """Back to Python's own schedule (the frozen objects rejoin the oldest generation)."""
        if self.frozen:
            gc.unfreeze()
            self.frozen = False
