"""`gpu_grpo.py --max-staleness ... --trace-dir D`: one pipelined step under torch.profiler.

Why: after session 8 the pipelined step is bound by the update running beside the engine
(0.73 s per step against 0.29 s alone, K = 2 on a thread). Whether that is the GPU (decode
kernels on the engine's high-priority stream taking SMs from the update's) or the host (the
update's thread waiting for the interpreter lock held by the engine's and the episodes'
threads) shows in a trace of one step: kernel time per CUDA stream, how much of it overlaps
another stream's, and the gaps. With the thread producer both halves are in this process, so
the profiler sees them all (a rollout child's kernels it cannot see).

`summarize` reads the exported Chrome trace: per stream, the kernels' summed time and the
share of it that ran while a kernel of another stream also ran; and the device's busy span
(the union of all kernels) against the step's wall time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch


def traced(fn: Any, path: Path) -> Any:
    """Run `fn()` under the profiler (CPU + CUDA), write the Chrome trace to `path`, and
    return `fn`'s result with the trace's summary."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        out = fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(path))
    return out, summarize(path)


def summarize(path: Path) -> dict[str, Any]:
    events = json.loads(Path(path).read_text()).get("traceEvents", [])
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    if not kernels:
        return {"kernels": 0}
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"]), _stream(e)) for e in kernels)
    per_stream: dict[str, dict[str, float]] = {}
    for start, end, stream in spans:
        s = per_stream.setdefault(stream, {"kernel_ms": 0.0, "kernels": 0, "overlapped_ms": 0.0})
        s["kernel_ms"] += (end - start) / 1e3
        s["kernels"] += 1
    for stream, stats in per_stream.items():
        others = _union([(a, b) for a, b, s in spans if s != stream])
        mine = _union([(a, b) for a, b, s in spans if s == stream])
        stats["overlapped_ms"] = _intersection(mine, others) / 1e3
        # Between this stream's first and last kernel: the time it ran nothing, and how much
        # of that the whole device was idle too. A stream waiting while another stream's
        # kernels run is sharing the GPU; waiting on an idle device, it waits on its host
        # thread (Python, the interpreter lock, a sync).
        gaps = [(a[1], b[0]) for a, b in zip(mine, mine[1:], strict=False)]
        gap = sum(b - a for a, b in gaps)
        stats["window_ms"] = (mine[-1][1] - mine[0][0]) / 1e3
        stats["gap_ms"] = gap / 1e3
        stats["gap_device_idle_ms"] = (gap - _intersection(gaps, others)) / 1e3
    busy = _union([(a, b) for a, b, _ in spans])
    first, last = spans[0][0], max(b for _, b, _ in spans)
    return {
        "kernels": len(spans),
        "per_stream": per_stream,
        "device_busy_ms": sum(b - a for a, b in busy) / 1e3,
        "kernel_span_ms": (last - first) / 1e3,
    }


def _stream(event: dict[str, Any]) -> str:
    args = event.get("args", {})
    return str(args.get("stream", event.get("tid", "?")))


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersection(spans: list[tuple[float, float]], union: list[tuple[float, float]]) -> float:
    """Time of `spans` (possibly overlapping each other) covered by the disjoint `union`."""
    total, j = 0.0, 0
    for a, b in _union(spans):
        while j < len(union) and union[j][1] <= a:
            j += 1
        k = j
        while k < len(union) and union[k][0] < b:
            total += min(b, union[k][1]) - max(a, union[k][0])
            k += 1
    return total
