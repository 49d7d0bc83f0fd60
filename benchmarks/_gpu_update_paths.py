"""`benchmarks/gpu_grpo.py --compare-update-paths R`: the update's two paths side by side.

The same Actor, the same captured GRPO batch, the same process: `trainer.update_path`
materialized (the lm-head's logits held for backward, loss metrics read per micro-batch) and
fused (`agentrl/trainer/fused_head.py`: lm-head + log-softmax/entropy in row chunks, metrics
read once per update). Each path gets one warm-up update (compiles its chunk kernels), then
the paths alternate for R timed updates each, so drift (clocks, allocator) hits both alike.
Reported per path: mean/min update seconds, MFU over the executed FLOPs of the batch (the
same count as the timed steps), peak memory (CUDA) above what was allocated before the
update; and the ratio fused / materialized. The weights move by lr 1e-6 per update.
"""

from __future__ import annotations

import time
from typing import Any

import torch

PATHS = ("materialized", "fused")


def compare_update_paths(
    actor: Any, batch: Any, flops: float, reps: int, device: str, peak_flops: float
) -> dict[str, Any]:
    """Time `actor.update(batch)` under both update paths (see the module docstring)."""
    start = actor.cfg.update_path
    cuda = device == "cuda"
    runs: dict[str, list[float]] = {p: [] for p in PATHS}
    peaks: dict[str, float] = {p: 0.0 for p in PATHS}
    for rep in range(reps + 1):  # rep 0: warm-up of each path, not timed
        for path in PATHS:
            actor.set_update_path(path)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            t = time.perf_counter()
            actor.update(batch)
            if cuda:
                torch.cuda.synchronize()
                peaks[path] = max(peaks[path], (torch.cuda.max_memory_allocated() - base) / 2**30)
            if rep:
                runs[path].append(time.perf_counter() - t)
    actor.set_update_path(start)
    out: dict[str, Any] = {"reps": reps, "flops_per_update": flops}
    for path in PATHS:
        mean = sum(runs[path]) / max(len(runs[path]), 1)
        out[path] = {
            "update_s": runs[path],
            "update_s_mean": mean,
            "update_s_min": min(runs[path], default=0.0),
            "mfu": flops / mean / peak_flops if cuda and mean else None,
            "peak_gib_above_start": peaks[path] if cuda else None,
        }
    old, new = out["materialized"]["update_s_mean"], out["fused"]["update_s_mean"]
    out["speedup_fused"] = old / new if new else None
    if cuda:
        out["mfu_ratio_fused"] = out["fused"]["mfu"] / out["materialized"]["mfu"]
    return out


def summary_line(cmp: dict[str, Any]) -> str:
    """One human line: both paths' update time, MFU and peak memory, and the ratio."""

    def part(path: str) -> str:
        r = cmp[path]
        mfu = f"{100 * r['mfu']:.1f}% MFU, " if r["mfu"] is not None else ""
        mem = f", +{r['peak_gib_above_start']:.1f} GiB peak" if r["mfu"] is not None else ""
        return f"{path} {mfu}{1e3 * r['update_s_mean']:.1f} ms{mem}"

    return (
        f"update paths ({cmp['reps']} reps each): {part('materialized')} | {part('fused')} | "
        f"fused speedup {cmp['speedup_fused']:.3f}x"
    )
