"""How many intra-op threads torch uses (`trainer.cpu_threads`, 0 = auto).

Why not torch's default (one per core): its intra-op parallelism splits each matmul across
all threads and waits for the slowest. On a machine whose cores are busy with other work,
some thread is always descheduled, and every op waits for it. Measured on the 2-core box
this project runs CI-like checks on, at load 16-21, quickstart SFT steps took a median of
17.0 s with 2 threads and 2.1 s with 1 (8.1x; BENCHMARKS.md, benchmarks/diagnostics/sft_threads.py).

Auto therefore uses the cores that are idle when the run starts: the core count minus the
1-minute load average (rounded), at least 1 and at most torch's default. A quiet machine
keeps every core; a busy one stops fighting for cores it would not get. `OMP_NUM_THREADS`
set by the user wins over auto; an explicit `trainer.cpu_threads=N` wins over both.

A CUDA run's auto is **one** thread. Its host thread only launches kernels, and torch's
default pool (one worker per core) made them late: on the H200 host (16 cores), the 0.5B
update took ~200 ms for its first 21-36 rounds with 15 pool workers burning ~80 ms of CPU
each per round and the launching thread waiting in the run queue (~90 ms a round), then
~124 ms; with one thread every round took ~124 ms (mean 124.3 / 126.8 ms against 172.2 /
155.7 ms, two runs each, both orders; BENCHMARKS.md, benchmarks/gpu_update_mfu.py).
"""

from __future__ import annotations

import os

import torch


def auto_threads(cores: int, load_1min: float) -> int:
    return max(1, min(cores, round(cores - load_1min)))


def choose_cpu_threads(requested: int, device_type: str = "cpu") -> tuple[int, str]:
    """(thread count, why) for a run on `device_type`."""
    if requested > 0:
        return requested, "trainer.cpu_threads"
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads(), "OMP_NUM_THREADS"
    if device_type == "cuda":
        return 1, "auto: a CUDA run's host thread launches kernels"
    cores = torch.get_num_threads()
    load = os.getloadavg()[0]
    return auto_threads(cores, load), f"auto: {cores} cores, load {load:.1f}"


def apply_cpu_threads(requested: int, device: torch.device, log: bool = True) -> int | None:
    """Set torch's intra-op threads for a CPU or CUDA run (other devices keep torch's)."""
    if device.type not in ("cpu", "cuda"):
        return None
    n, why = choose_cpu_threads(requested, device.type)
    torch.set_num_threads(n)
    if log:
        print(f"cpu threads: {n} ({why})", flush=True)
    return n
