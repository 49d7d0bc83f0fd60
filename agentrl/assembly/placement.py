"""The `Placement` interface, the in-process placement, and the `trainer.placement` choice.

A placement builds the same `Components` either way; remote roles are proxies with the
methods of the local ones (`trainer.components`' Protocols), so `Trainer.train()` composes
them without knowing where they live. See docs/scaling.md.

Under torchrun (`trainer.backend=fsdp2`, several ranks) every rank builds its own engine, so
the local placement wraps the rollout in `ShardedRollout`: each rank generates a slice of the
prompts and all ranks train on the gathered batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrl.config import TrainConfig
    from agentrl.trainer.components import Components


class Placement(ABC):
    @classmethod
    @abstractmethod
    def build(cls, cfg: TrainConfig) -> Components:
        """Every role of the run, local objects or proxies with the same methods."""


class LocalPlacement(Placement):
    @classmethod
    def build(cls, cfg: TrainConfig) -> Components:
        from agentrl.workers.sharded import ShardedRollout

        from .build import build_components

        c = build_components(cfg)
        if c.backend.world_size > 1:
            c.rollout = ShardedRollout(c.rollout, c.backend)
        return c


def _local() -> type[Placement]:
    return LocalPlacement


def _ray() -> type[Placement]:
    from .ray_placement import RayPlacement

    return RayPlacement


PLACEMENTS: dict[str, Callable[[], type[Placement]]] = {"local": _local, "ray": _ray}


def place(cfg: TrainConfig) -> Components:
    """Build every role where `cfg.trainer.placement` says."""
    kind = cfg.trainer.placement
    if kind not in PLACEMENTS:
        raise ValueError(f"unknown trainer.placement {kind!r}; known: {sorted(PLACEMENTS)}")
    return PLACEMENTS[kind]().build(cfg)
