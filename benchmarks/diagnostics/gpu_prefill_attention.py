"""Fast-engine prefill on a GPU: its pinned SDPA kernel vs torch's default kernel choice.

Why: `FastHFEngine` prefills with an explicit `col <= pos` mask, and prefill shapes (rows,
new tokens, attended length) differ on almost every call (staggered second turns of a
multi-turn rollout). Left to itself torch may pick cuDNN's attention for masked bf16 on
Hopper, which builds a plan per new shape; `_static_model.PREFILL_BACKENDS` pins the
memory-efficient kernel instead. This times `StaticDecoder.prefill` on a random-init
Qwen2.5-0.5B-shaped model (bf16) for fresh shapes and for the same shapes again, under both
choices, and prints the ratio against the default ("peer": torch's own backend choice).

    python benchmarks/diagnostics/gpu_prefill_attention.py --json benchmarks/results/gpu_prefill.json
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend

import agentrl.engines._static_model as sm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared builders
from gpu_engine import SHAPES, build_model  # noqa: E402
from gpu_grpo import sync, write  # noqa: E402

ALL_BACKENDS = [
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]


def shapes(seed: int, count: int) -> list[list[tuple[int, int, list[int]]]]:
    """`count` prefill calls of new shapes: 8-128 rows, 10-60 new tokens after 0-200 cached."""
    rng = random.Random(seed)
    calls = []
    for _ in range(count):
        n = rng.randint(8, 128)
        calls.append(
            [
                (i, rng.randint(0, 200), [rng.randint(1, 600)] * rng.randint(10, 60))
                for i in range(n)
            ]
        )
    return calls


def time_calls(decoder: Any, calls: list[Any], device: str) -> list[float]:
    out = []
    for rows in calls:
        sync(device)
        t = time.perf_counter()
        with torch.inference_mode():
            decoder.prefill(rows)
        sync(device)
        out.append((time.perf_counter() - t) * 1e3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    p.add_argument("--calls", type=int, default=12)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = build_model(args.shape, args.device, dtype)
    decoder = sm.StaticDecoder(model, slots=129, max_len=512)
    time_calls(decoder, shapes(99, 2), args.device)  # allocator and kernel warm-up
    result: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
    }
    for name, backends, seed in (
        ("torch_default", ALL_BACKENDS, 1),
        ("agentrl_pinned", list(sm.PREFILL_BACKENDS), 2),
    ):
        sm.PREFILL_BACKENDS = backends
        calls = shapes(seed, args.calls)
        fresh = time_calls(decoder, calls, args.device)
        again = time_calls(decoder, calls, args.device)
        result[name] = {
            "fresh_shape_ms_median": statistics.median(fresh),
            "same_shape_again_ms_median": statistics.median(again),
            "fresh_ms": fresh,
            "again_ms": again,
        }
    base, ours = result["torch_default"], result["agentrl_pinned"]
    for key in ("fresh_shape_ms_median", "same_shape_again_ms_median"):
        result[f"speedup_{key}"] = base[key] / ours[key]
    print(write(result, args.json))


if __name__ == "__main__":
    main()
