"""Weight sync, trainer → in-process rollout engine, for the Qwen2.5-0.5B shape (goal < 1 s).

What `Trainer.train_step` does after each update: `Rollout.sync_weights(actor.named_weights())`,
i.e. stream the actor's full state dict into the engine's own copy of the model with in-place
`copy_` (same GPU, no host round trip; KV sessions dropped). Timed here in isolation, with the
engine built by `make_hf_engine` (CUDA-graph fast path on GPU) when available.

    python benchmarks/gpu_weight_sync.py --json benchmarks/results/gpu_weight_sync.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch


def build(device: str, shape: str) -> tuple[Any, Any]:
    """(trainer model, engine) on `device`; the engine holds its own copy of the weights."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from agentrl.engines import HFEngine

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shapes live in gpu_grpo
    from gpu_grpo import QWEN05_VOCAB, SHAPES

    cfg = Qwen2Config(**SHAPES[shape], vocab_size=QWEN05_VOCAB, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    model.to(torch.bfloat16 if device == "cuda" else torch.float32)
    frozen = copy.deepcopy(model).eval().requires_grad_(False)
    try:
        from agentrl.engines import make_hf_engine

        engine = make_hf_engine(frozen, [2], max_batch_size=64, max_seq_len=1024)
    except ImportError:
        engine = HFEngine(frozen, [2], max_batch_size=64)
    return model, engine


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--shape", default="qwen2.5-0.5b")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    from agentrl.backends import TorchBackend

    model, engine = build(args.device, args.shape)
    backend = TorchBackend(args.device)
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    times = []
    for _ in range(args.reps + 1):
        with torch.no_grad():  # a stand-in optimizer step, so the copy moves new values
            for prm in model.parameters():
                prm.add_(1e-3)
        if args.device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        engine.update_weights(backend.full_state_dict(model))
        if args.device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    ok = all(
        torch.equal(a, b)
        for a, b in zip(
            model.state_dict().values(), engine.model.state_dict().values(), strict=True
        )
    )
    timed = times[1:]
    out = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "engine": type(engine).__name__,
        "shape": args.shape,
        "bytes": nbytes,
        "first_s": times[0],
        "sync_s": timed,
        "median_s": sorted(timed)[len(timed) // 2],
        "gb_per_s": nbytes / sorted(timed)[len(timed) // 2] / 1e9,
        "engine_weights_equal_trainer": ok,
    }
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
