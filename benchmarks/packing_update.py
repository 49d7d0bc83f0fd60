"""One `Actor.update` on multi-turn episodes of mixed length: padded vs packed micro-batches.

The peer is the padded micro-batch (right-padded to the longest row), what TRL's
`GRPOTrainer` and verl without `use_remove_padding` train on. agentrl's `trainer.packing`
lays each micro-batch's sequences end to end instead (`agentrl/trainer/packing.py`). Same
model, same batch, same process; both updates must move the weights identically (checked).

Episodes mimic tool-using rollouts: most are short (one or two turns), a few run long, so
padding to the longest row in a micro-batch wastes a large share of the compute.

    python benchmarks/packing_update.py [--preset qwen2-small] [--rows 64] [--micro 16]
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from agentrl.backends import TorchBackend
from agentrl.config import AlgorithmConfig, OptimConfig, TrainerConfig
from agentrl.models.load import load_model
from agentrl.trainer.actor import Actor
from agentrl.trainer.batch import TrainBatch, collate
from agentrl.types import Trajectory, TrajectoryGroup, Turn


def episodes(rows: int, seed: int, vocab: int, long_every: int) -> list[TrajectoryGroup]:
    rng = random.Random(seed)
    trajs = []
    for i in range(rows):
        t = Trajectory(prompt_ids=[rng.randrange(3, vocab) for _ in range(rng.randint(60, 120))])
        turns = rng.randint(4, 8) if i % long_every == 0 else rng.randint(1, 2)
        for k in range(turns):
            start = len(t.response_ids)
            sampled = [rng.randrange(3, vocab) for _ in range(rng.randint(20, 60))]
            t.append(sampled, trained=True, logprobs=[-1.0] * len(sampled))
            end = len(t.response_ids)
            if k < turns - 1:
                obs = [rng.randrange(3, vocab) for _ in range(rng.randint(20, 80))]
                t.append(obs, trained=False)
            t.turns.append(Turn(start=start, end=end, obs_end=len(t.response_ids)))
        t.reward = float(i % 2)
        trajs.append(t)
    return [TrajectoryGroup(f"g{i}", [t]) for i, t in enumerate(trajs)]


def update_seconds(model_path: str, batch: TrainBatch, packing: bool, micro: int) -> tuple:
    from agentrl.config import ModelConfig

    torch.manual_seed(0)
    model = load_model(ModelConfig(path=model_path))
    trainer = TrainerConfig(mini_batch_size=batch.size, micro_batch_size=micro, packing=packing)
    actor = Actor(model, TorchBackend("cpu"), AlgorithmConfig(), OptimConfig(lr=1e-4), trainer)
    t = time.perf_counter()
    actor.update(batch, torch.Generator().manual_seed(0))
    seconds = time.perf_counter() - t
    return seconds, {k: v.detach().clone() for k, v in actor.model.named_parameters()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen2-small")
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--micro", type=int, default=16)
    ap.add_argument("--long-every", type=int, default=8, help="every Nth episode runs long")
    args = ap.parse_args()
    path = f"tiny:{args.preset}"
    batch = collate(episodes(args.rows, 0, 600, args.long_every), pad_id=0)
    batch.advantages = torch.linspace(-1, 1, batch.size)[:, None] * batch.response_mask
    real = int(batch.attention_mask.sum())
    update_seconds(path, batch, True, args.micro)  # warm-up (allocator, first-call costs)
    padded_s, padded_w = update_seconds(path, batch, False, args.micro)
    packed_s, packed_w = update_seconds(path, batch, True, args.micro)
    worst = max(float((packed_w[k] - padded_w[k]).abs().max()) for k in padded_w)
    print(f"{args.rows} episodes, {real} real tokens, micro-batch {args.micro}, {args.preset}")
    print(f"padded micro-batches (peer): {padded_s:.2f} s")
    print(f"packed (trainer.packing):    {packed_s:.2f} s")
    print(f"ratio: {padded_s / packed_s:.2f}x; max weight difference after the update {worst:.1e}")


if __name__ == "__main__":
    main()
