"""`benchmarks/gpu_grpo.py --compare-update-paths R`: the update's paths side by side.

The same Actor, the same captured GRPO batch, the same process, three variants:

- `before`: the update as it was: `trainer.update_path: materialized` (the lm-head's logits
  held for backward) and loss metrics read after every micro-batch (`defer_metrics` off);
- `materialized`: the same, but metrics read once per update (`agentrl.algorithms.deferred`);
- `fused`: `trainer.update_path: fused` (`agentrl/trainer/fused_head.py`: lm-head +
  log-softmax/entropy in row chunks, recomputed in backward) with deferred metrics.

Each variant gets one warm-up update (compiles its chunk kernels), then the variants
alternate for R timed updates each, so drift (clocks, allocator) hits all alike. Reported per
variant: mean/min update seconds, MFU over the executed FLOPs of the batch (the same count as
the timed steps), peak memory (CUDA) above what was allocated before the update, and with
`--profile` one profiled update (device busy share, top ops); the ratios to `before`. The
weights move by lr 1e-6 per update.
"""

from __future__ import annotations

import time
from typing import Any

import torch

VARIANTS = {"before": ("materialized", False), "materialized": ("materialized", True)}
VARIANTS["fused"] = ("fused", True)  # name: (trainer.update_path, defer_metrics)


def _use(actor: Any, variant: str) -> None:
    path, defer = VARIANTS[variant]
    actor.set_update_path(path)
    actor.defer_metrics = defer


def compare_update_paths(
    actor: Any,
    batch: Any,
    flops: float,
    reps: int,
    device: str,
    peak_flops: float,
    profile: Any = None,
) -> dict[str, Any]:
    """Time `actor.update(batch)` under each variant (see the module docstring);
    `profile(fn, device)`: gpu_grpo's `profile_call`, run once per variant after the timing."""
    start = (actor.cfg.update_path, actor.defer_metrics)
    cuda = device == "cuda"
    runs: dict[str, list[float]] = {p: [] for p in VARIANTS}
    peaks: dict[str, float] = {p: 0.0 for p in VARIANTS}
    for rep in range(reps + 1):  # rep 0: warm-up of each variant, not timed
        for path in VARIANTS:
            _use(actor, path)
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
    out: dict[str, Any] = {"reps": reps, "flops_per_update": flops}
    for path in VARIANTS:
        mean = sum(runs[path]) / max(len(runs[path]), 1)
        out[path] = {
            "update_s": runs[path],
            "update_s_mean": mean,
            "update_s_min": min(runs[path], default=0.0),
            "mfu": flops / mean / peak_flops if cuda and mean else None,
            "peak_gib_above_start": peaks[path] if cuda else None,
        }
        if profile is not None:
            _use(actor, path)
            prof = profile(lambda: actor.update(batch) or {}, device)
            prof["top_device_ops"] = prof["top_device_ops"][:15]
            prof["top_host_ops"] = prof["top_host_ops"][:15]
            out[path]["profile"] = prof
        out[path]["speedup_vs_before"] = out["before"]["update_s_mean"] / mean if mean else None
    actor.set_update_path(start[0])
    actor.defer_metrics = start[1]
    return out


def summary_line(cmp: dict[str, Any]) -> str:
    """One human line: each variant's update time, MFU, peak memory and speedup."""

    def part(path: str) -> str:
        r = cmp[path]
        mfu = f"{100 * r['mfu']:.1f}% MFU, " if r["mfu"] is not None else ""
        mem = f", +{r['peak_gib_above_start']:.1f} GiB peak" if r["mfu"] is not None else ""
        return f"{path} {mfu}{1e3 * r['update_s_mean']:.1f} ms{mem} ({r['speedup_vs_before']:.3f}x)"

    return f"update paths ({cmp['reps']} reps each): " + " | ".join(map(part, VARIANTS))
