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
    errors: dict[str, str] = {}  # a failing variant is reported, the others still run
    for rep in range(reps + 1):  # rep 0: warm-up of each variant, not timed
        for path in [v for v in VARIANTS if v not in errors]:
            _use(actor, path)
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            t = time.perf_counter()
            try:
                actor.update(batch)
            except Exception as e:  # noqa: BLE001 - keep the other variants' numbers
                errors[path] = f"{type(e).__name__}: {e}"[:2000]
                continue
            if cuda:
                torch.cuda.synchronize()
                peaks[path] = max(peaks[path], (torch.cuda.max_memory_allocated() - base) / 2**30)
            if rep:
                runs[path].append(time.perf_counter() - t)
    out: dict[str, Any] = {"reps": reps, "flops_per_update": flops, "errors": errors}
    for path in [v for v in VARIANTS if v not in errors]:
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
            try:
                prof = profile(lambda: actor.update(batch) or {}, device)
            except Exception as e:  # noqa: BLE001 - the timings above still stand
                prof = {"error": f"{type(e).__name__}: {e}"[:2000]}
            for key in ("top_device_ops", "top_host_ops"):
                if key in prof:
                    prof[key] = prof[key][:15]
            out[path]["profile"] = prof
        before = out.get("before", {}).get("update_s_mean")
        out[path]["speedup_vs_before"] = before / mean if before and mean else None
    actor.set_update_path(start[0])
    actor.defer_metrics = start[1]
    return out


def summary_line(cmp: dict[str, Any]) -> str:
    """One human line: each variant's update time, MFU, peak memory and speedup."""

    def part(path: str) -> str:
        r = cmp[path]
        mfu = f"{100 * r['mfu']:.1f}% MFU, " if r["mfu"] is not None else ""
        mem = f", +{r['peak_gib_above_start']:.1f} GiB peak" if r["mfu"] is not None else ""
        up = r["speedup_vs_before"]
        speedup = f" ({up:.3f}x)" if up is not None else ""
        return f"{path} {mfu}{1e3 * r['update_s_mean']:.1f} ms{mem}{speedup}"

    done = [v for v in VARIANTS if v in cmp]
    errors = "".join(f" | {v} FAILED: {e[:200]}" for v, e in cmp["errors"].items())
    return f"update paths ({cmp['reps']} reps each): " + " | ".join(map(part, done)) + errors
