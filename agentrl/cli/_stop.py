"""How a long command stops: Ctrl-C and SIGTERM end it the same way, with one line.

A scheduler's stop, `kill`, or the end of an sbatch allocation sends SIGTERM; Python's
default would exit at once, mid-write, and leave child processes (agent programs, sandboxes,
vLLM's engine core) running. Under `sigterm_as_ctrl_c()` SIGTERM takes Ctrl-C's path instead:
whatever handles SIGINT at that moment is called with SIGTERM's number (the rollout loop
cancels its collect: episodes unwind, envs close), and where SIGINT is ignored, as for a job
started with `&` by a script (the shell ignores Ctrl-C for it), SIGTERM still stops the
command: it raises KeyboardInterrupt itself. The command then says what it kept and exits 130
after Ctrl-C, 143 after SIGTERM (`stop_code`).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

STOPS = (signal.SIGINT, signal.SIGTERM)  # what stops a command


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[list[int]]:
    """SIGTERM handled as Ctrl-C inside the block; yields the list SIGTERM is recorded in."""
    came: list[int] = []

    def on_term(signum: int, frame: FrameType | None) -> None:
        came.append(signum)
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):
            raise KeyboardInterrupt
        handler(signum, frame)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield came
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_code(came: list[int]) -> int:
    """The exit code of a stopped command: 143 after SIGTERM, 130 after Ctrl-C."""
    return 143 if came else 130


@contextlib.contextmanager
def unstoppable() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored inside the block (a checkpoint being written)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOPS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
