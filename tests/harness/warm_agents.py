"""Agents for the warm-parent tests (`rollout.harness.preload`): standard library only.

`BASE` is read at import, as a module-level OpenAI client reads `OPENAI_BASE_URL`: a run
forked from a parent that had imported this module would see the first run's session.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BASE = os.environ.get("AGENTRL_BASE_URL")


def probe(task: dict[str, Any], base_url: str) -> dict[str, Any]:
    """What a run's process looks like from inside."""
    preload = sys.modules.get("warm_preload")
    return {
        "answer": "probed",
        "base_at_import": BASE,
        "base_url": base_url,
        "env": {
            k: v for k, v in os.environ.items() if k.startswith(("AGENTRL_", "OPENAI_", "WARM_"))
        },
        "cwd": os.getcwd(),
        "stdin": sys.stdin.read(),
        "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
        "own_group": os.getpgid(0) == os.getpid(),
        "own_session": os.getsid(0) == os.getpid(),
        "argv": sys.argv,
        "random": random.random(),
        "preloaded_elsewhere": preload is not None and preload.PID != os.getpid(),
        "pid": os.getpid(),
        "ppid": os.getppid(),
    }


def exits_3(task: dict[str, Any], base_url: str) -> str:
    print("leaving", file=sys.stderr)
    sys.exit(3)


def raises(task: dict[str, Any], base_url: str) -> str:
    raise ValueError("the agent's own bug")


def raises_quoting(task: dict[str, Any], base_url: str) -> str:
    """An error whose message spans lines (an HTTP error quoting a server's grammar dump)."""
    try:
        raise KeyError("first")
    except KeyError:
        raise RuntimeError(
            "Error code: 500 - grammar rejected token 0\n<grammar>\n  start: call\n</grammar>"
        ) from None


def spawns(task: dict[str, Any], base_url: str) -> str:
    """Leaves a child behind (its pid in $WARM_PID_DIR), then returns or, with
    task["hang"], hangs."""
    child = subprocess.Popen(["sleep", "3600"])
    Path(os.environ["WARM_PID_DIR"], str(child.pid)).touch()
    if task.get("hang"):
        Path(os.environ["WARM_PID_DIR"], f"agent-{os.getpid()}").touch()
        time.sleep(3600)
    return "spawned"


def waits(task: dict[str, Any], base_url: str) -> str:
    """Runs until the file named in the task exists (the test's turn to look)."""
    path = Path(task["until"])
    deadline = time.monotonic() + 60
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "waited"
