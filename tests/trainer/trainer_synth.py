"""Synthetic multi-turn trajectories and trainer configs shared by the trainer tests.

Token ids are drawn from a seeded generator inside the tiny model's vocabulary; each episode has
sampled turns (mask 1, with logprobs) separated by env observations (mask 0), like a real
tool-calling rollout, so collate and the update see the same structure as in training.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from agentrl.config import AlgorithmConfig, OptimConfig, TrainerConfig
from agentrl.trainer.batch import TrainBatch, collate
from agentrl.types import Trajectory, TrajectoryGroup, Turn

VOCAB = 200  # below the tiny tokenizer's size


def trajectory(rng: random.Random, turns: int, reward: float) -> Trajectory:
    """`turns` sampled spans, each followed by an observation (none after the last)."""
    t = Trajectory(prompt_ids=[rng.randrange(3, VOCAB) for _ in range(rng.randint(3, 6))])
    for k in range(turns):
        start = len(t.response_ids)
        sampled = [rng.randrange(3, VOCAB) for _ in range(rng.randint(2, 5))]
        t.append(sampled, trained=True, logprobs=[-rng.random() for _ in sampled])
        end = len(t.response_ids)
        if k < turns - 1:
            t.append([rng.randrange(3, VOCAB) for _ in range(rng.randint(1, 3))], trained=False)
        t.turns.append(Turn(start=start, end=end, obs_end=len(t.response_ids), reward=0.1 * k))
    t.reward = reward
    t.validate()
    return t


def groups(sizes: list[int], seed: int = 0) -> list[TrajectoryGroup]:
    rng = random.Random(seed)
    return [
        TrajectoryGroup(
            f"g{i}", [trajectory(rng, rng.randint(1, 3), float(j % 2)) for j in range(n)]
        )
        for i, n in enumerate(sizes)
    ]


def batch(sizes: list[int], seed: int = 0) -> TrainBatch:
    """A collated batch with fixed per-row advantages (old log-probs are set by the caller)."""
    b = collate(groups(sizes, seed), pad_id=0)
    adv = torch.linspace(-1.0, 1.0, b.size)[:, None]
    b.advantages = adv * b.response_mask
    return b


def configs(**trainer: object) -> tuple[AlgorithmConfig, OptimConfig, TrainerConfig]:
    algo = AlgorithmConfig(loss_agg_mode=str(trainer.pop("mode", "token-mean")))  # type: ignore[arg-type]
    lr, clip = float(trainer.pop("lr", 1e-3)), float(trainer.pop("grad_clip", 1.0))  # type: ignore[arg-type]
    optim = OptimConfig(lr=lr, grad_clip=clip)
    return algo, optim, TrainerConfig(steps=2, **trainer)  # type: ignore[arg-type]


def train_overrides(cache: Path | str, out_dir: Path | str, **extra: object) -> list[str]:
    """Small but real `agentrl train` overrides: tiny model, 2 prompts × 2 samples."""
    base = {
        "model.path": "tiny:qwen2",
        "model.cache_dir": str(cache),
        "data.env": "math/calc-easy-v0",
        "data.batch_size": 2,
        "data.eval_episodes": 2,
        "rollout.n": 2,
        "sampling.max_new_tokens": 16,
        "trainer.tensorboard": "false",
        "trainer.steps": 1,
        "trainer.mini_batch_size": 4,
        "trainer.micro_batch_size": 2,
        "trainer.out_dir": str(out_dir),
        "sft.steps": 0,
    }
    base |= {k.replace("__", "."): v for k, v in extra.items()}
    return [f"{k}={v}" for k, v in base.items()]
