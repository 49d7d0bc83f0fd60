"""SPIN (Chen et al. 2024, "Self-Play Fine-Tuning Converts Weak Language Models to Strong").

Each iteration pairs, per prompt, a demonstration y (the env's oracle, rolled out token-exact
through the chat template exactly as SFT sees it) with the previous iterate's own sample y'
(a full multi-turn rollout on the same task), and trains with
`spin_loss` = −log σ(β·[(log π_θ(y) − log π_prev(y)) − (log π_θ(y') − log π_prev(y'))]).
The policy learns to tell its own generations from the data until it can no longer: the
fixed point is π_θ = p_data. Only sampled tokens count in log π (tool results are masked).

Needs an env with `oracle_action` and seed-based tasks (`data.path` empty).
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.algorithms import spin_loss
from agentrl.trainer.sft import build_demos
from agentrl.types import Trajectory

from .base import SelfPlayRecipe


class SPIN(SelfPlayRecipe):
    real: list[Trajectory]
    gen: list[Trajectory]

    def collect(self, items: list[Any]) -> tuple[int, dict[str, float]]:
        if any(not isinstance(i, int) for i in items):
            raise ValueError("SPIN needs env seeds (data.path empty): demos come from the oracle")
        self.real = build_demos(self.c.make_env, self.rollout.runner.chat, list(items))
        groups = self.c.rollout.collect(items, 1)
        self.gen = [g.trajectories[0] for g in groups]
        self.prev_real = self.prev_logps(self.real)
        self.prev_gen = self.prev_logps(self.gen)
        rewards = [t.reward for t in self.gen]
        return len(items), {
            "reward/generated": sum(rewards) / len(rewards),
            "reward/demos": sum(t.reward for t in self.real) / len(self.real),
            "response_length/generated": sum(sum(t.loss_mask) for t in self.gen) / len(self.gen),
        }

    def loss(self, rows: list[int]) -> tuple[torch.Tensor, dict[str, float]]:
        real = self.sequence_logps([self.real[i] for i in rows], grad=True)
        gen = self.sequence_logps([self.gen[i] for i in rows], grad=True)
        return spin_loss(real, self.prev_real[rows], gen, self.prev_gen[rows], beta=self.sp.beta)
