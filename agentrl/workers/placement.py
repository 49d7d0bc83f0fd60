"""The `Placement` interface and the in-process placement.

Under torchrun (`trainer.backend=fsdp2`, several ranks) every rank builds its own engine, so
the local placement wraps the rollout in `ShardedRollout`: each rank generates a slice of the
prompts and all ranks train on the gathered batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrl.config import TrainConfig
    from agentrl.trainer.build import Components


class Placement(ABC):
    @classmethod
    @abstractmethod
    def build(cls, cfg: TrainConfig) -> Components:
        """Every role of the run, local objects or proxies with the same methods."""


class LocalPlacement(Placement):
    @classmethod
    def build(cls, cfg: TrainConfig) -> Components:
        from agentrl.trainer.build import build_components

        from .sharded import ShardedRollout

        c = build_components(cfg)
        if c.backend.world_size > 1:
            c.rollout = ShardedRollout(c.rollout, c.backend)  # type: ignore[assignment]
        return c
