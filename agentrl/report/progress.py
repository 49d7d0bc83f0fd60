"""Progress of a run's phases (SFT, each rollout, each eval, the step loop) with ETAs.

Why: the quickstart's SFT bootstrap alone takes minutes on a loaded CPU, and a run that
prints nothing for minutes reads as hung. On a terminal, rich bars (count, elapsed, ETA and
a status field such as the SFT loss); when output is not a terminal (a log file, CI), no
bars but a plain line per task at most every `plain_every_s` seconds, and one when it ends.

    progress = RunProgress(console)
    with progress.task("sft", total=500) as t:
        for step in ...:
            t.advance(status=f"loss {loss:.3f}")
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _clock(s: float) -> str:
    m, sec = divmod(int(s), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else f"{m}m{sec:02d}s"


class Task:
    """One phase being counted; `advance` it, optionally with a short status text."""

    def __init__(self, owner: RunProgress, name: str, total: int, task_id: TaskID | None) -> None:
        self.owner, self.name, self.total, self.id = owner, name, max(int(total), 0), task_id
        self.done, self.status, self.printed = 0, "", False
        self.t0 = self.last_print = time.monotonic()

    def advance(self, n: int = 1, status: str | None = None) -> None:
        self.done += n
        if status is not None:
            self.status = status
        bar = self.owner.bar
        if bar is not None and self.id is not None:
            bar.update(self.id, advance=n, status=self.status)
        elif self.owner.enabled and time.monotonic() - self.last_print >= self.owner.plain_every_s:
            self.print_line()

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        parts = [f"{self.name}: {self.done}/{self.total}"]
        if self.total:
            parts.append(f"({self.done / self.total:.0%})")
        if self.status:
            parts.append(self.status)
        parts.append(f"elapsed {_clock(elapsed)}")
        if 0 < self.done < self.total:
            parts.append(f"eta {_clock(elapsed / self.done * (self.total - self.done))}")
        return " ".join(parts)

    def print_line(self) -> None:
        self.last_print, self.printed = time.monotonic(), True
        self.owner.console.print(self.line(), markup=False, highlight=False)


class RunProgress:
    """Bars on a terminal, periodic plain lines otherwise, nothing when `enabled` is False
    (non-main ranks). Use the same `console` for other output so lines print above the bars.
    Off a terminal a short phase prints nothing (the run's own log line covers it); one that
    printed a periodic line, or a non-transient one, also prints a closing line."""

    def __init__(
        self, console: Console, *, enabled: bool = True, plain_every_s: float = 30.0
    ) -> None:
        self.console, self.enabled, self.plain_every_s = console, enabled, plain_every_s
        self.bar: Progress | None = None
        self._open = 0

    @property
    def interactive(self) -> bool:
        return self.enabled and self.console.is_terminal

    @contextmanager
    def task(self, name: str, total: int, *, transient: bool = True) -> Iterator[Task]:
        """Count a phase. On a terminal a `transient` bar disappears when done (the run's own
        log line reports it); the outermost bar (the step loop) is kept by `transient=False`."""
        self._start()
        tid = None
        if self.bar is not None:
            tid = self.bar.add_task(name, total=total, status="")
        task = Task(self, name, total, tid)
        try:
            yield task
        finally:
            if self.bar is not None and tid is not None:
                if transient:
                    self.bar.remove_task(tid)
            elif self.enabled and task.done and (task.printed or not transient):
                task.print_line()  # the closing line of a long (or the outermost) phase
            self._stop()

    def _start(self) -> None:
        self._open += 1
        if self.interactive and self.bar is None:
            self.bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[status]}"),
                console=self.console,
            )
            self.bar.start()

    def _stop(self) -> None:
        self._open -= 1
        if self._open == 0 and self.bar is not None:
            self.bar.stop()
            self.bar = None

    def callback(self, task: Task) -> Any:
        """A one-argument callable advancing `task` (for per-episode hooks)."""
        return lambda _item=None: task.advance()
