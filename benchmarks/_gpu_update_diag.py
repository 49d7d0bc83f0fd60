"""What `gpu_update_mfu.py` records beside each timed update, to explain a slow one: dynamo's
counters (graph breaks, frames compiled, recompiles), Python garbage collections and the
caching allocator's calls to the driver during the update, the host's scheduling of the
process's threads and the GPU's SM clock during it, and a failing variant's error; and the
threaded-probe base the async sweep's probes share."""

from __future__ import annotations

import os
import threading
import time
import traceback
from typing import Any, TypeVar

import torch

P = TypeVar("P", bound="ThreadedProbe")


class ThreadedProbe:
    """A context manager that runs `_run` on a daemon thread until exit (the samplers and
    probes of the async sweep share it); `_stop` tells `_run` to end."""

    active = True  # False: nothing to sample here (the thread is not started)

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self: P) -> P:
        if self.active:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self.active:
            self._thread.join()


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


class GcPauses:
    """Python's collections while inside the `with` block: per generation, how many and
    their total and longest time (ms). A full (generation-2) collection stops every thread
    of the process: the async sweep's suspect for its single-step stalls of 1.6-3.2 s, and
    one took 467 ms inside a timed update (session 11; session 10's runs had <= 3 ms per
    run, so collections were not the suspect then)."""

    def __init__(self) -> None:
        self.ms: dict[int, list[float]] = {0: [], 1: [], 2: []}
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.ms[int(info["generation"])].append(1e3 * (time.perf_counter() - self._start))

    def __enter__(self) -> GcPauses:
        import gc

        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: Any) -> None:
        import gc

        gc.callbacks.remove(self._callback)

    def result(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for gen, ms in self.ms.items():
            out |= {f"gc{gen}_count": float(len(ms)), f"gc{gen}_ms": sum(ms),
                    f"gc{gen}_max_ms": max(ms, default=0.0)}  # fmt: skip
        return out

    def total(self) -> tuple[float, int]:
        """(ms, count) of every collection, all generations."""
        return sum(map(sum, self.ms.values())), sum(map(len, self.ms.values()))


def error_text(e: BaseException) -> str:
    tail = "".join(traceback.format_exception(e)[-3:])
    return f"{type(e).__name__}: {e}"[:1500] + "\n" + tail[-1500:]


# Two more suspects for the slow outliers (31 of 80 updates 45-70 ms slower, session 10, with
# no allocator call and no GC in them): the host (the process's threads ready to run but not
# scheduled: another tenant on the machine's cores, or hypervisor steal) and the GPU (its SM
# clock lowered: power or thermal capping, or another process's kernels). `host_counters` is
# read before and after each update; `ClockSampler` samples NVML on a thread.


def _tasks() -> list[tuple[int, int, int]]:
    """(tid, on-CPU ns, waiting-to-run ns) of each thread of this process (Linux
    `/proc/self/task/*/schedstat`; empty elsewhere). A thread that ends meanwhile is left
    out."""
    import glob

    out = []
    for path in glob.glob("/proc/self/task/*/schedstat"):
        try:
            on_cpu, waiting, _ = open(path).read().split()
        except (OSError, ValueError):
            continue
        out.append((int(path.split("/")[-2]), int(on_cpu), int(waiting)))
    return out


def host_counters() -> dict[str, float]:
    """CPU time and run-queue wait (ms) summed over this process's threads (`_tasks`),
    involuntary context switches, and the machine's steal time (ms, `/proc/stat`)."""
    import resource

    tasks = _tasks()
    out = {
        "cpu_ms": sum(t[1] for t in tasks) / 1e6,
        "runq_ms": sum(t[2] for t in tasks) / 1e6,
        "nivcsw": float(resource.getrusage(0).ru_nivcsw),
    }
    try:
        fields = open("/proc/stat").readline().split()
        out["steal_ms"] = int(fields[8]) * 1e3 / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    return out


def thread_cpu_ms() -> dict[str, float]:
    """On-CPU ms of each thread of this process, keyed `name/tid`: a Python thread's name
    (`threading`), else the OS name (`comm`: torch's autograd and OpenMP workers, the CUDA
    driver's threads). Which thread burns the CPU in a slow update. Empty off Linux."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for tid, on_cpu, _ in _tasks():
        if (name := names.get(tid)) is None:
            try:
                name = open(f"/proc/self/task/{tid}/comm").read().strip()
            except OSError:
                continue
        out[f"{name}/{tid}"] = on_cpu / 1e6
    return out


def top_threads(before: dict[str, float], after: dict[str, float], n: int = 6) -> dict[str, float]:
    """The `n` threads that spent the most CPU between two `thread_cpu_ms` readings."""
    delta = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return dict(sorted(delta.items(), key=lambda kv: -kv[1])[:n])


def nvml_device() -> tuple[Any, Any] | None:
    """(pynvml, this process's device handle), or None where NVML is unavailable."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = torch.cuda.current_device() if torch.cuda.is_available() else 0
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no NVML here
        return None


class NvmlProbe(ThreadedProbe):
    """A sampler thread over NVML (`self._nvml`, `self._h`); not started without NVML."""

    def __init__(self, name: str) -> None:
        nvml = nvml_device()
        self._nvml, self._h = nvml if nvml is not None else (None, None)
        self.active = nvml is not None
        super().__init__(name)


class ClockSampler(NvmlProbe):
    """NVML every `period` s on a daemon thread while inside the `with` block: (time, SM
    clock MHz, clock-event reasons, utilisation %, power W). `window(t0, t1)` summarises the
    samples between two `time.perf_counter()` readings. Inactive (empty windows) without
    NVML."""

    def __init__(self, period: float = 0.005) -> None:
        self.period, self.samples = period, []
        super().__init__("nvml-clocks")

    def _run(self) -> None:
        n, h = self._nvml, self._h
        reasons = (
            getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or n.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        while not self._stop.wait(self.period):
            try:
                self.samples.append((
                    time.perf_counter(), n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
                    int(reasons(h)), n.nvmlDeviceGetUtilizationRates(h).gpu,
                    n.nvmlDeviceGetPowerUsage(h) / 1e3,
                ))  # fmt: skip
            except Exception:  # noqa: BLE001 - a failed read: skip the sample
                continue

    def foreign_processes(self) -> int | None:
        """Compute processes on the device other than this one (None: unknown)."""
        if self._nvml is None:
            return None
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._h)
        except Exception:  # noqa: BLE001
            return None
        return sum(1 for p in procs if p.pid != os.getpid())

    def window(self, t0: float, t1: float) -> dict[str, float]:
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if not inside:
            return {}
        clocks = [s[1] for s in inside]
        mask = 0
        for s in inside:
            mask |= s[2]
        return {
            "sm_mhz_min": float(min(clocks)),
            "sm_mhz_mean": sum(clocks) / len(clocks),
            "clock_reasons": float(mask & ~1),  # bit 0 is "GPU idle", not a slowdown
            "util_mean": sum(s[3] for s in inside) / len(inside),
            "power_w_max": max(s[4] for s in inside),
            "nvml_samples": float(len(inside)),
        }
