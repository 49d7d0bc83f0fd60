"""What one of Python's full garbage collections costs inside a step, on a compiled model's
heap: Python's own schedule (peer) against `trainer.gc_every` (agentrl/trainer/gc_control.py).

Why: on the H200, one update of 80 took 582 ms instead of 125, 467 ms of it in one full
collection (BENCHMARKS.md, session 11). A full collection walks every object the cyclic
collector tracks; after `torch.compile` those include the compilers' caches. Python starts
one whenever enough objects have survived, at whatever point the step is in. The trainer's
schedule runs it at the step boundary instead and freezes the survivors, after which the
automatic passes inside a step skip them.

This builds the heap a compiled run has (the `tiny` qwen2 model, compiled as
`trainer.compile` compiles it, a few forward/backward passes), then times a full collection
(`gc.collect()`, what an automatic full pass costs) `--reps` times as Python's schedule
leaves the heap, and as it is after the schedule's first boundary (a freeze), and what the
boundaries themselves cost. Prints the objects each walks and the ratio.

    python benchmarks/diagnostics/gc_pauses.py --json benchmarks/results/gc_pauses.json
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from agentrl.trainer.gc_control import GcSchedule


def compiled_heap(preset: str, passes: int) -> Any:
    """A tiny model with each decoder layer compiled (`agentrl.models.compile`), after
    `passes` forward/backward passes over growing lengths (dynamic shapes)."""
    from transformers import AutoModelForCausalLM

    from agentrl.models.compile import decoder_layers
    from agentrl.models.tiny import build_tiny

    path = build_tiny(preset, tempfile.mkdtemp(prefix="gc_pauses_"))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    for layer in decoder_layers(model):
        layer.compile(dynamic=True)
    for i in range(passes):
        ids = torch.randint(3, 100, (2, 16 + 8 * i))
        model(ids).logits.float().mean().backward()
    return model


def time_full_pass(reps: int) -> tuple[list[float], int]:
    """Seconds of `reps` full collections, and the objects the collector tracks outside
    the permanent generation."""
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        gc.collect()
        out.append(time.perf_counter() - t)
    return out, len(gc.get_objects())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="qwen2")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    t = time.perf_counter()
    model = compiled_heap(args.preset, args.passes)
    build_s = time.perf_counter() - t
    python_own, walked_before = time_full_pass(args.reps)
    schedule = GcSchedule(1)
    boundary_s = schedule.after_step(1) or 0.0  # the first boundary: a freeze
    try:
        frozen, walked_after = time_full_pass(args.reps)
        frozen_count = gc.get_freeze_count()
        full_boundary_s = schedule.after_step(2) or 0.0  # a later one: a full walk
    finally:
        schedule.close()
    del model
    peer, ours = statistics.median(python_own), statistics.median(frozen)
    out = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "build_s": build_s,
        "full_pass_ms_python_schedule": [1e3 * s for s in python_own],
        "full_pass_ms_after_boundary": [1e3 * s for s in frozen],
        "objects_walked_python_schedule": walked_before,
        "objects_walked_after_boundary": walked_after,
        "objects_frozen": frozen_count,
        "first_boundary_ms": 1e3 * boundary_s,
        "later_boundary_ms": 1e3 * full_boundary_s,
        "speedup_vs_python_schedule": peer / ours if ours > 0 else None,
    }
    print(f"compiled heap built in {build_s:.0f} s; {frozen_count} objects frozen at the first "
          f"boundary ({1e3 * boundary_s:.1f} ms); a later boundary's full collection "
          f"{1e3 * full_boundary_s:.0f} ms (both between steps)")  # fmt: skip
    ratio = out["speedup_vs_python_schedule"]
    shown = "over 1000x" if ratio is None or ratio > 1000 else f"{ratio:.1f}x"
    print(f"a full collection inside a step: Python's schedule {1e3 * peer:.1f} ms "
          f"({walked_before} objects walked), after the boundary {1e3 * ours:.3f} ms "
          f"({walked_after} walked): {shown} shorter")  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
