"""A foreign env in a child process of another Python: `env_kwargs: {python: PATH}`.

Why: some ecosystems pin packages agentrl's own environment cannot hold (verifiers pins
`mcp==2.0.0` and `openai<3`; openreward pins `sse-starlette==2.3.6`). Installed in a venv of
their own, their env runs there, in a child process, and the trainer talks to it over a pipe:

    agentrl train --env vf:my_pkg.tasks:MyTaskset data.env_kwargs.python=.venv-vf/bin/python

Any prefixed id works this way (`agentrl.envs.interop.resolve` reads the `python` key). The
child runs `python -m agentrl.envs.interop.env_worker`, so that venv needs agentrl too (`pip
install --no-deps agentrl`, or `--system-site-packages` with agentrl installed here); the
foreign package is imported only there.

The pipe carries JSON, never pickle: the child runs foreign code next to whatever the env lets
the agent run, so nothing it sends may execute in the trainer. Messages, tool calls and tool
schemas cross exactly; `info` crosses as JSON (a value JSON cannot hold becomes its `repr`);
images do not cross (a VLM env stays in-process). Requests and replies go over two pipes of
their own (fds handed to the child), so an env that prints to stdout cannot corrupt them; the
child's stdout and stderr go to a temporary file whose tail names the failure when the child
dies. Every call waits at most `process_timeout_s` (default 600; start-up at least `START_S`; a
child that hangs is killed and the call raises
`TimeoutError` naming the env); `close()` stops the child (SIGTERM, then SIGKILL).

One worker per env instance at a time. The rollout builds one env per episode, so a closed
env's worker is parked (its env closed) and the next env of the same kind (interpreter, id,
kwargs) is built in it: only the first episodes pay the interpreter's start-up and the
imports. A worker that failed is never parked; parked ones stop when the trainer exits (and
on their own when its end of the pipe closes).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from agentrl.tools.processes import stop_group
from agentrl.tools.workers import in_daemon_thread
from agentrl.types import Message, ToolCall

from ..core import AgentEnv, Observation

# What a child reports about its env at start (class attributes the rollout and check_env read).
ATTRS = ("family", "description", "reward_range", "max_turns", "max_observation_chars")
# The child's start-up (an interpreter, agentrl's and the foreign package's imports, the
# env's constructor) may take this long even when calls are given less.
START_S = 300.0
_LEN = 8  # bytes of the length prefix (hex) before each JSON frame


def encode_message(m: Message) -> dict[str, Any]:
    if m.images:
        raise ValueError("a message with images cannot cross to an env in another process")
    d = asdict(m)
    del d["images"]
    return d


def decode_message(d: dict[str, Any]) -> Message:
    d = dict(d)
    d["tool_calls"] = [ToolCall(**c) for c in d.get("tool_calls", [])]
    d.pop("images", None)
    return Message(**d)


def encode_observation(obs: Observation) -> dict[str, Any]:
    return {"messages": [encode_message(m) for m in obs.messages], "tools": obs.tools}


def decode_observation(d: dict[str, Any]) -> Observation:
    return Observation([decode_message(m) for m in d["messages"]], list(d.get("tools", [])))


def to_json(value: Any) -> Any:
    """`info` and the like: JSON as is; anything JSON cannot hold becomes its repr."""
    return json.loads(json.dumps(value, default=repr))


def write_frame(fd: int, payload: dict[str, Any]) -> None:
    data = json.dumps(payload, ensure_ascii=False).encode()
    buf = f"{len(data):0{_LEN}x}".encode() + data
    while buf:
        buf = buf[os.write(fd, buf) :]


def read_frame(fd: int, deadline: float | None = None, max_bytes: int = 256 << 20) -> Any:
    """One frame from `fd`; EOFError when the writer is gone, TimeoutError past `deadline`."""

    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError
            chunk = os.read(fd, n - len(out))
            if not chunk:
                raise EOFError
            out += chunk
        return out

    head = exactly(_LEN)
    try:
        size = int(head, 16)
    except ValueError:
        raise EOFError(f"bad frame header {head!r}") from None
    if size > max_bytes:
        raise EOFError(f"frame of {size} bytes (over {max_bytes})")
    return json.loads(exactly(size))


class _Child:
    """One worker process and its two pipes; parked in `_POOL` between envs."""

    def __init__(self, exe: Path) -> None:
        self.log = tempfile.TemporaryFile()
        req_r, self.req = os.pipe()
        self.rep, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [str(exe), "-m", "agentrl.envs.interop.env_worker", str(req_r), str(rep_w)],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
            pass_fds=(req_r, rep_w),
            start_new_session=True,  # its own process group: stop() reaches its children
        )
        os.close(req_r)
        os.close(rep_w)

    def tail(self, n: int = 1200) -> str:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(self.log.tell() - n, 0))
        return self.log.read().decode(errors="replace").strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            stop_group(self.proc)
        for fd in (self.req, self.rep):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


# Idle workers by (interpreter, env id, kwargs): an env's close() parks its worker (the env
# inside is closed) and the next env of the same kind builds in it, so episodes after the
# first skip the interpreter's start-up and the imports. Stopped at exit.
_POOL: dict[tuple[str, str, str], list[_Child]] = {}
_POOL_LOCK = threading.Lock()
POOL_MAX = 256  # idle workers kept per kind (the rollout's concurrency, typically)


@atexit.register
def _drain_pool() -> None:
    with _POOL_LOCK:
        children = [c for kind in _POOL.values() for c in kind]
        _POOL.clear()
    for c in children:
        try:
            write_frame(c.req, {"op": "close"})
        except OSError:
            pass
    for c in children:
        c.stop()


class ProcessEnv(AgentEnv):
    """`env_id` built by `agentrl.envs.make` in a child process of `python`."""

    family = "process"

    def __init__(
        self, env_id: str, *, python: str, process_timeout_s: float = 600.0, **kwargs: Any
    ) -> None:
        exe = Path(python).expanduser()
        if not exe.is_file() or not os.access(exe, os.X_OK):
            raise FileNotFoundError(
                f"env {env_id!r}: env_kwargs.python={python!r} is not an executable file"
            )
        self.env_id, self.timeout_s = env_id, float(process_timeout_s)
        args = to_json(kwargs)
        self._kind = (str(exe.resolve()), env_id, json.dumps(args, sort_keys=True))
        with _POOL_LOCK:
            idle = _POOL.get(self._kind, [])
            child = idle.pop() if idle else None
        if child is not None and child.proc.poll() is not None:
            child.stop()  # died while parked
            child = None
        self._child: _Child | None = child or _Child(exe)
        attrs = self._call("build", id=env_id, kwargs=args)
        for name in ATTRS:  # instance attributes shadow this class's defaults
            if name in attrs:
                value = attrs[name]
                setattr(self, name, tuple(value) if name == "reward_range" else value)

    @property
    def _proc(self) -> subprocess.Popen[bytes] | None:
        return None if self._child is None else self._child.proc

    # ---------------------------------------------------------------- the pipe
    def _call(self, op: str, **payload: Any) -> Any:
        child = self._child
        if child is None:
            raise RuntimeError(f"env {self.env_id!r}: its process is closed")
        wait = max(self.timeout_s, START_S) if op == "build" else self.timeout_s
        try:
            write_frame(child.req, {"op": op, **payload})
            reply = read_frame(child.rep, time.monotonic() + wait)
        except TimeoutError:
            self._child = None
            child.stop()
            raise TimeoutError(
                f"env {self.env_id!r} (own process): {op} took over {wait:g}s "
                "(env_kwargs.process_timeout_s); the process was stopped"
            ) from None
        except (EOFError, OSError) as e:
            self._child = None
            tail = child.tail()
            child.stop()
            raise RuntimeError(
                f"env {self.env_id!r} (own process) died during {op}: {e or 'pipe closed'}"
                + (f"; its output ends: {tail}" if tail else "")
            ) from None
        if not reply.get("ok"):
            raise RuntimeError(f"env {self.env_id!r} (own process), {op}: {reply.get('error')}")
        return reply.get("value")

    # ---------------------------------------------------------------- the env API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        value = self._call("reset", seed=seed, options=to_json(options))
        return decode_observation(value["obs"]), value["info"]

    def step(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        v = self._call("step", action=encode_message(action))
        return decode_observation(v["obs"]), float(v["reward"]), v["term"], v["trunc"], v["info"]

    def oracle_action(self) -> Message | None:
        value = self._call("oracle")
        return None if value is None else decode_message(value)

    def adversaries(self) -> dict[str, list[Message]]:
        value = self._call("adversaries")
        return {name: [decode_message(m) for m in ms] for name, ms in value.items()}

    def close(self) -> None:
        """Close the env in its worker and park the worker for the next env of this kind
        (or stop it, when the pool is full or the env's close failed)."""
        if self._child is None:
            return
        try:
            self._call("release")
        except RuntimeError:
            if (child := self._child) is not None:  # the env's close raised: no reuse
                self._child = None
                child.stop()
            raise
        child, self._child = self._child, None
        if child is None:
            return
        with _POOL_LOCK:
            idle = _POOL.setdefault(self._kind, [])
            if len(idle) < POOL_MAX:
                idle.append(child)
                return
        write_frame(child.req, {"op": "close"})
        child.stop()

    async def aclose(self) -> None:
        """`close` off the event loop (the worker's reply may take as long as the env's own
        close)."""
        await in_daemon_thread(self.close)

    def __del__(self) -> None:  # a forgotten env must not leave its worker running
        child = getattr(self, "_child", None)
        if child is not None and sys.meta_path is not None:
            self._child = None
            child.stop()
