"""Sync tool calls from an event loop: a thread per call (before) vs kept daemon workers.

Why: on the H200 the pipelined rollout's event loop spent 14% of its time blocked in
`Thread.start()` (session 10's stack sampler): `start()` returns only once the new thread
runs, which needs the interpreter lock, and beside a trainer thread running Python that
takes a while. `agentrl/tools/workers.py` now keeps its daemon workers for the next call.

Measured: `--calls` sync tool calls (each sleeps `--tool-ms`) issued from one event loop, in
waves of `--concurrency`, with `--busy` threads spinning in Python beside it (the pipelined
update's thread stands in for them). Reported per variant: wall time, and the event loop's
time inside the dispatch call (how long the loop is held per call). The peer is the old
code: a new daemon thread per call.

    python benchmarks/diagnostics/tool_threads.py            # JSON to stdout; --json PATH to keep it
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's agentrl

from agentrl.tools import ToolSet, tool  # noqa: E402
from agentrl.tools import core as tool_core  # noqa: E402
from agentrl.types import ToolCall  # noqa: E402


def thread_per_call(fn: Any, kwargs: dict[str, Any]) -> asyncio.Future[Any]:
    """The old `in_daemon_thread`: a new daemon thread for every call (the named peer)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Any] = loop.create_future()

    def target() -> None:
        value = fn(**kwargs)
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(value))

    threading.Thread(target=target, daemon=True).start()
    return fut


def spin(stop: threading.Event) -> None:
    x = 0
    while not stop.is_set():
        x = (x * 31 + 7) % 1_000_003  # pure Python: holds the interpreter lock


def run_variant(name: str, args: argparse.Namespace) -> dict[str, Any]:
    @tool
    def work(ms: float) -> str:
        """Sleep like an I/O-bound tool.

        Args:
            ms: milliseconds.
        """
        time.sleep(ms / 1e3)
        return "ok"

    ts = ToolSet.of(work)
    original = tool_core.in_daemon_thread
    held: list[float] = []

    def timed(fn: Any, /, **kwargs: Any) -> asyncio.Future[Any]:
        t = time.perf_counter()
        fut = thread_per_call(fn, kwargs) if name == "thread_per_call" else original(fn, **kwargs)
        held.append(time.perf_counter() - t)
        return fut

    async def body() -> None:
        for _ in range(args.calls // args.concurrency):
            calls = [ToolCall("work", {"ms": args.tool_ms}) for _ in range(args.concurrency)]
            results = await asyncio.gather(*(ts.acall(c) for c in calls))
            assert all(not r.is_error for r in results), results[0]

    stop = threading.Event()
    busy = [threading.Thread(target=spin, args=(stop,), daemon=True) for _ in range(args.busy)]
    for b in busy:
        b.start()
    tool_core.in_daemon_thread = timed  # type: ignore[assignment]
    try:
        t = time.perf_counter()
        asyncio.run(body())
        wall = time.perf_counter() - t
    finally:
        tool_core.in_daemon_thread = original
        stop.set()
        for b in busy:
            b.join()
    held.sort()
    return {
        "wall_s": wall,
        "dispatch_ms_mean": 1e3 * sum(held) / len(held),
        "dispatch_ms_p90": 1e3 * held[int(0.9 * len(held))],
        "loop_held_share": sum(held) / wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=100)
    p.add_argument("--tool-ms", type=float, default=5.0)
    p.add_argument("--busy", type=int, default=1, help="threads spinning in Python beside")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    out: dict[str, Any] = {"args": vars(args) | {"json": None}, "variants": {}}
    for name in ("thread_per_call", "kept_workers", "thread_per_call", "kept_workers"):
        r = run_variant(name, args)
        out["variants"].setdefault(name, []).append(r)
    old = sum(r["wall_s"] for r in out["variants"]["thread_per_call"])
    new = sum(r["wall_s"] for r in out["variants"]["kept_workers"])
    out["wall_ratio_old_over_new"] = old / new
    text = json.dumps(out, indent=1)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
