"""Stopping a child process we started together with everything it started.

Children started with `start_new_session=True` lead their own process group, so a server's or
a worker's own children (a shell it ran, a subprocess pool) are reached by signalling the
group, and a polite SIGTERM gets a grace period before SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM `proc`'s process group, then SIGKILL after `grace_s`; returns once it is reaped
    (or after `grace_s` more if even SIGKILL leaves it unreaped)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue
