"""`Actor.update` on CPU under the update's variants: before / materialized / fused.

The variants of `_gpu_update_paths` (before: the lm-head's `[tokens, vocab]` logits kept for
backward, loss metrics read after every micro-batch; materialized: metrics read once per
update; fused: `agentrl/trainer/fused_head.py`, lm-head + log-softmax/entropy in row chunks
recomputed in backward). Same model, same multi-turn batch (`packing_update.episodes`), same
process; each variant starts from the same weights, runs one warm-up update on a copy, then
the variants alternate `--reps` times. All must move the weights identically (checked).
`--vocab` pads the lm-head to a real vocabulary's size (Qwen: 151,936), where the fused
path's recomputed product costs the most. The GPU comparison (time, MFU, peak memory) is
`gpu_grpo.py --compare-update-paths`.

    taskset -c 0 python benchmarks/diagnostics/update_paths.py [--preset qwen2-small] [--rows 32]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from agentrl.backends import TorchBackend
from agentrl.config import AlgorithmConfig, ModelConfig, OptimConfig, TrainerConfig
from agentrl.models.load import load_model
from agentrl.trainer.actor import Actor
from agentrl.trainer.batch import collate

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared pieces
from _gpu_update_paths import VARIANTS  # noqa: E402
from packing_update import episodes  # noqa: E402


def actor(variant: str, args: argparse.Namespace) -> Actor:
    torch.manual_seed(0)
    model = load_model(ModelConfig(path=f"tiny:{args.preset}"))
    if args.vocab:
        model.resize_token_embeddings(args.vocab, mean_resizing=False)
    path, defer = VARIANTS[variant]
    cfg = TrainerConfig(
        mini_batch_size=args.rows,
        micro_batch_size=args.micro,
        packing=not args.padded,
        update_path=path,  # type: ignore[arg-type]
    )
    out = Actor(model, TorchBackend("cpu"), AlgorithmConfig(entropy_coef=0.01), OptimConfig(), cfg)
    out.defer_metrics = defer
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen2-small")
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--padded", action="store_true", help="trainer.packing off")
    ap.add_argument("--vocab", type=int, default=0, help="pad the vocabulary to this size")
    args = ap.parse_args()
    batch = collate(episodes(args.rows, 0, 600, 8), pad_id=0)
    batch.advantages = torch.linspace(-1, 1, batch.size)[:, None] * batch.response_mask
    actors = {v: actor(v, args) for v in VARIANTS}
    for a in actors.values():  # warm-up on a throwaway copy of the weights
        saved = {k: v.clone() for k, v in a.model.state_dict().items()}
        a.update(batch, torch.Generator().manual_seed(0))
        a.model.load_state_dict(saved)
        a.optimizer.state.clear()
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for rep in range(args.reps):
        for v in VARIANTS:
            t = time.perf_counter()
            actors[v].update(batch, torch.Generator().manual_seed(rep))
            times[v].append(time.perf_counter() - t)
    w = {v: {k: p.detach() for k, p in actors[v].model.named_parameters()} for v in VARIANTS}
    worst = max(float((w[v][k] - w["before"][k]).abs().max()) for v in VARIANTS for k in w[v])
    vocab = actors["fused"].model.get_output_embeddings().weight.shape[0]
    print(f"{args.rows} episodes, {int(batch.attention_mask.sum())} real tokens, vocab {vocab},")
    print(f"micro-batch {args.micro}, {args.preset}, packing {not args.padded}")
    print(f"load average {os.getloadavg()}")
    before = statistics.median(times["before"])
    for v in VARIANTS:
        med = statistics.median(times[v])
        ts = ", ".join(f"{t:.3f}" for t in times[v])
        print(f"{v:>12}: median {med:.3f} s, {before / med:.3f}x before ({ts})")
    print(f"max weight difference to before after {args.reps} updates: {worst:.1e}")


if __name__ == "__main__":
    main()
