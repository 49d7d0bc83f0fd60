"""Math answer verification with `math-verify`: LaTeX, `\\boxed{}`, fractions, intervals, sets.

`is_equivalent(prediction, gold)` parses both sides into sympy objects and compares them, so
`\\frac{1}{2}` matches `0.5`, `\\boxed{x=2}` matches `2` and `\\{3,1,2\\}` matches
`\\{1,2,3\\}`; string comparison would call all of those wrong and teach the policy formatting
instead of math.

Why the wrapping below:
* A gold answer is a bare expression (`[1,2)`), which math-verify only reads as LaTeX inside
  `$...$`; we add the delimiters when the gold has none.
* A prediction is a whole model message; math-verify extracts its `\\boxed{}` (or last
  expression) itself. A short bare answer it cannot read is retried inside `$...$`.
* The parsing and the comparison run in a worker process, never in the caller's. sympy
  evaluates what it reads, and a 17-character answer (`\\boxed{9^{9^{9}}}`, `(10^{7})!`) is
  a computation of hours that holds the GIL, stalling every thread of a training process.
  math-verify's own timeouts use `signal.alarm`, which works only on a main thread (envs are
  stepped in worker threads) and cannot interrupt one long C call. In its worker (single
  threaded, on its main thread) math-verify's timeouts work, and the caller kills the worker
  when it has not answered within `TIMEOUT_S`, whatever thread it calls from: such an answer
  scores 0 and the next call gets a fresh worker. The caller only waits on a pipe, so its
  other threads run meanwhile.
* Workers are kept (up to `POOL_SIZE`, started on demand) and reused: a call costs a pipe
  round trip (~0.2 ms) over the verification itself; a new worker costs a Python start and
  the math-verify import (~1 s) once.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time

log = logging.getLogger(__name__)

MAX_CHARS = 4000
"""Only the last `MAX_CHARS` of a prediction are parsed; the answer is at the end."""
TIMEOUT_S = 10.0
"""Hard bound on one verification (parse both sides and compare), on any thread."""
POOL_SIZE = max(1, min(4, os.cpu_count() or 1))
"""Most worker processes alive at once; more concurrent calls wait for one."""
_START_TIMEOUT_S = 60.0
_SHORT = 64
_MV_TIMEOUT_S = 5  # math-verify's own (signal) timeouts, inside the worker
_MEMORY_BYTES = 2 << 30  # a worker's address-space limit: a runaway answer fails, not the host

_WORKER = f"""
import json, os, resource, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the caller; we exit on stdin EOF
proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)  # stray prints go to stderr; stdout's copy carries only answers
resource.setrlimit(resource.RLIMIT_AS, ({_MEMORY_BYTES}, {_MEMORY_BYTES}))
from math_verify import parse, verify

def check(gold, preds):
    gold_parsed = parse(gold, parsing_timeout={_MV_TIMEOUT_S})
    for text in preds:
        parsed = parse(text, parsing_timeout={_MV_TIMEOUT_S})
        if parsed:
            break
    else:
        return False
    if not gold_parsed:
        return False
    return bool(verify(gold_parsed, parsed, timeout_seconds={_MV_TIMEOUT_S}))

proto.write('"ready"\\n')
proto.flush()
for line in sys.stdin:
    gold, preds = json.loads(line)
    try:
        ok = check(gold, preds)
    except Exception:  # MemoryError, RecursionError, a parser bug: not equivalent
        ok = False
    proto.write(json.dumps(ok) + "\\n")
    proto.flush()
"""


def _delimited(text: str) -> bool:
    return "$" in text or "\\boxed" in text or "\\(" in text or "\\[" in text


def gold_text(gold: str | int | float) -> str:
    """A dataset's ground truth (bare LaTeX or a number) as math-verify reads it."""
    text = str(gold).strip()
    return text if _delimited(text) else f"${text}$"


def prediction_texts(text: str) -> list[str]:
    """A model's answer as math-verify reads it: the message's tail, then (if that yields
    nothing) a short bare answer inside `$...$`."""
    text = text[-MAX_CHARS:]
    texts = [text]
    if 0 < len(text.strip()) <= _SHORT and not _delimited(text):
        texts.append(f"${text.strip()}$")
    return texts


def is_equivalent(prediction: str, gold: str | int | float) -> bool:
    """True if the prediction's final answer equals the gold answer mathematically.

    Returns within `TIMEOUT_S` (plus a worker start when none is idle) on any thread; an
    answer whose verification does not finish in time is not equivalent.
    """
    request = json.dumps([gold_text(gold), prediction_texts(prediction)]) + "\n"
    return _POOL.ask(request)


class _Worker:
    """One verifier process, spoken to in JSON lines over its stdin/stdout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._buf = b""
        try:
            ready = self._read(_START_TIMEOUT_S)
        except (TimeoutError, EOFError) as e:
            self.kill()
            raise RuntimeError(f"math-verify worker did not start ({e}); see its stderr") from e
        if json.loads(ready) != "ready":
            self.kill()
            raise RuntimeError(f"math-verify worker said {ready[:80]!r} instead of ready")

    def ask(self, request: str, timeout: float) -> bool:
        assert self.proc.stdin is not None
        self.proc.stdin.write(request.encode())
        self.proc.stdin.flush()
        return bool(json.loads(self._read(timeout)))

    def _read(self, timeout: float) -> bytes:
        assert self.proc.stdout is not None
        fd, deadline = self.proc.stdout.fileno(), time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no answer within {timeout:g}s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError(f"worker exited with {self.proc.poll()}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()


class _Pool:
    """Idle workers for reuse; at most `POOL_SIZE` alive. A worker that times out or dies is
    killed and dropped, so a bad answer never leaves a busy process behind."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # a child must not share our pipes

    def _reset(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(POOL_SIZE)

    def ask(self, request: str) -> bool:
        # Each slot holder finishes within 2 * (_START_TIMEOUT_S + TIMEOUT_S): a bounded wait.
        with self._slots:
            for attempt in (1, 2):
                with self._lock:
                    worker = self._idle.pop() if self._idle else None
                if worker is None:
                    worker = _Worker()  # raises if math-verify cannot start: not a 0 reward
                try:
                    ok = worker.ask(request, TIMEOUT_S)
                except TimeoutError as e:
                    log.warning("math-verify: answer scored 0, worker killed: %s", e)
                    worker.kill()
                    return False
                except (EOFError, OSError, ValueError) as e:  # it died (idle or on this answer)
                    log.warning("math-verify: worker lost (%s), attempt %d of 2", e, attempt)
                    worker.kill()
                    continue
                with self._lock:
                    self._idle.append(worker)
                return ok
            return False

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


_POOL = _Pool()
atexit.register(_POOL.close)
