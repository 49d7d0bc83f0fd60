"""Where the trainer's roles run: in this process (`local`) or as Ray actors (`ray`).

A `Placement` builds the same `Components` either way; remote roles are proxies with the
methods of the local ones, so `Trainer.train()` composes them without knowing where they live.
Chosen by `trainer.placement`; see docs/scaling.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentrl.config import TrainConfig
    from agentrl.trainer.build import Components

    from .placement import Placement


def _local() -> type[Placement]:
    from .placement import LocalPlacement

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


__all__ = ["PLACEMENTS", "place"]
