"""SPPO (Wu et al. 2024, "Self-Play Preference Optimization for Language Model Alignment").

Each iteration samples K = `rollout.n` multi-turn responses per prompt with the previous
iterate, estimates each response's win probability against the others from env rewards,

    P(y_i ≻ π_prev | x) ≈ 1/(K−1) · Σ_{j≠i} [1(r_i > r_j) + ½·1(r_i = r_j)],

and regresses the log-ratio onto it with `sppo_loss` = (log π_θ(y)/π_prev(y) − η(P − ½))².
The env's verifier is the preference model: a response that beats its siblings gains
probability mass relative to π_prev, one that loses gives it up, ties stay put.
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.algorithms import sppo_loss
from agentrl.types import Trajectory

from .base import SelfPlayRecipe


def win_probabilities(rewards: torch.Tensor) -> torch.Tensor:
    """`[G, K]` rewards → `[G, K]` P(sample beats a sibling), ties counting one half."""
    k = rewards.shape[-1]
    if k < 2:
        raise ValueError("SPPO needs rollout.n >= 2 samples per prompt")
    diff = rewards[..., :, None] - rewards[..., None, :]
    wins = (diff > 0).float() + 0.5 * (diff == 0).float()
    wins = wins - 0.5 * torch.eye(k)  # a sample does not play itself
    return wins.sum(-1) / (k - 1)


class SPPO(SelfPlayRecipe):
    samples: list[Trajectory]

    def collect(self, items: list[Any]) -> tuple[int, dict[str, float]]:
        groups = self.c.rollout.collect(items, self.cfg.rollout.n)
        rewards = torch.tensor([[t.reward for t in g.trajectories] for g in groups])
        self.win = win_probabilities(rewards).flatten()
        self.samples = [t for g in groups for t in g.trajectories]
        self.prev = self.prev_logps(self.samples)
        n = len(self.samples)
        return n, {
            "reward/mean": float(rewards.mean()),
            "win_prob/abs_dev": float((self.win - 0.5).abs().mean()),
            "response_length/mean": sum(sum(t.loss_mask) for t in self.samples) / n,
        }

    def loss(self, rows: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        logps = self.sequence_logps([self.samples[i] for i in rows], grad=True)
        return sppo_loss(logps, self.prev[rows], self.win[rows].to(logps.device), eta=self.sp.eta)
