"""A command agent with full Python that attacks the sandbox it runs in (`rollout.harness.sandbox:
local`); `test_harness_sandbox.py` gives it the targets as JSON in argv[1].

Odd seeds: start a daemon in a session of its own (`sleep <marker>`) and hang, so the timeout
must kill the whole sandboxed tree. Even seeds: make one model call through the session URL,
then try to read a file the test made outside the sandbox and the run folder, reach another
loopback port, write outside its working dir, and list what processes and environment it
sees; the report (one JSON line) is its answer.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from openai import OpenAI

HERE = os.path.dirname(os.path.abspath(__file__))
args = json.loads(sys.argv[1])
task = json.loads(os.environ["AGENTRL_TASK"])
if task["seed"] % 2:
    subprocess.Popen(["sleep", args["marker"]], start_new_session=True)
    time.sleep(10_000)

OpenAI(max_retries=0).chat.completions.create(
    model="policy", messages=[{"role": "user", "content": task["prompt"]}], max_tokens=4
)


def attempt(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the probe reports what stopped it
        return type(e).__name__
    return "ok"


def connect(port: int) -> None:
    socket.create_connection(("127.0.0.1", port), timeout=5).close()


def write(path: str) -> None:
    with open(path, "w") as f:
        f.write("escaped")


def cmdlines() -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")[:2]
            out.append(" ".join(os.path.basename(a)[:40] for a in argv))
        except OSError:
            pass
    return out


report = {
    "read_secret": attempt(lambda: open(args["secret"]).read()),
    "list_run": attempt(lambda: os.listdir(args["run"])),
    "read_config": attempt(lambda: open(os.path.join(args["run"], "config.yaml")).read()),
    "other_port": attempt(lambda: connect(args["port"])),
    "write_host_tmp": attempt(lambda: write(args["write"])),
    "write_own_code": attempt(lambda: write(os.path.join(HERE, "escaped.txt"))),
    "write_usr": attempt(lambda: write("/usr/escaped.txt")),
    "write_workdir": attempt(lambda: write("escaped.txt")),
    "env": sorted(os.environ),
    "uid": os.getuid(),
    "processes": cmdlines(),
}
print(json.dumps(report))
