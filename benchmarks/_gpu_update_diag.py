"""What `gpu_update_mfu.py` records beside each timed update, to explain a slow one: dynamo's
counters (graph breaks, frames compiled, recompiles), Python garbage collections and the
caching allocator's calls to the driver during the update, and a failing variant's error."""

from __future__ import annotations

import time
import traceback
from typing import Any

import torch


def dynamo_snapshot() -> dict[str, Any]:
    from torch._dynamo.utils import counters

    breaks = dict(counters["graph_break"])
    return {
        "graph_breaks": sum(breaks.values()),
        "graph_break_reasons": {k.split("\n")[0][:160]: v for k, v in breaks.items()},
        "frames": dict(counters["frames"]),
        "recompiles": dict(counters["recompiles"]),
    }


def reset_dynamo_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


# The caching allocator's own calls to the driver during one update (cudaMalloc, cudaFree,
# retries after a failed allocation freed the cache): the other suspect for the slow
# outliers (~1 update in 10, 45-90 ms slow, in the 2026-12-04 runs).
ALLOC_KEYS = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")


def allocator_counts(device: str) -> dict[str, int]:
    if device != "cuda":
        return {}
    stats = torch.cuda.memory_stats()
    return {k: int(stats.get(k, 0)) for k in ALLOC_KEYS}


# Python garbage collections during the timed update (ms each): a full collection over the
# compiler's many objects was a suspect for the slow outliers; the 2026-12-04 runs spent
# <= 3 ms per run in them, so not those.
GC_MS: list[float] = []
_GC_START: list[float] = []


def gc_timer(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _GC_START[:] = [time.perf_counter()]
    elif _GC_START:
        GC_MS.append(1e3 * (time.perf_counter() - _GC_START[0]))


def error_text(e: BaseException) -> str:
    tail = "".join(traceback.format_exception(e)[-3:])
    return f"{type(e).__name__}: {e}"[:1500] + "\n" + tail[-1500:]
