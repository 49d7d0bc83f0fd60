"""Rollout split over the ranks of a process group (torchrun + FSDP2).

Each rank holds a full engine; generating every prompt on every rank would waste N-1 engines
and, with different sampling RNG per rank, give each rank a different batch. Instead rank r
generates prompts r, r+N, ... and the groups are gathered back into prompt order, so all ranks
train on one identical batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from agentrl.backends import TrainingBackend
from agentrl.rollout.runner import summarize
from agentrl.trainer.components import EpisodeHook, RolloutRole
from agentrl.types import TrajectoryGroup


def interleave(parts: list[list[Any]], world: int) -> list[Any]:
    """Undo the strided split: item i came from rank i % world, position i // world."""
    total = sum(len(p) for p in parts)
    out: list[Any] = [None] * total
    for rank, part in enumerate(parts):
        for j, item in enumerate(part):
            out[rank + j * world] = item
    return out


class ShardedRollout:
    def __init__(self, inner: RolloutRole, backend: TrainingBackend) -> None:
        self.inner, self.backend = inner, backend
        self.chat = inner.chat
        self._stats: dict[str, float] = {}

    # Each rank's engine serves its own slice; a pipelined trainer cannot schedule on that.
    producer = None

    def _mine(self, items: Sequence[Any]) -> list[Any]:
        return list(items)[self.backend.rank :: self.backend.world_size]

    def collect(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> list[TrajectoryGroup]:
        """This rank's prompts, gathered; `on_episode` sees this rank's episodes."""
        mine = self._mine(items)
        groups = self.inner.collect(mine, n, on_episode) if mine else []
        wall = self.inner.stats.get("wall_s", 0.0) if mine else 0.0
        parts = self.backend.gather_objects((groups, wall))
        gathered = interleave([p[0] for p in parts], self.backend.world_size)
        self._stats = summarize(gathered) | {"wall_s": max(p[1] for p in parts)}
        return gathered

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    def collect_with_greedy(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]:
        """Samples and greedy baselines of this rank's prompts together, gathered like `collect`."""
        mine = self._mine(items)
        empty: tuple[list[TrajectoryGroup], list[TrajectoryGroup]] = ([], [])
        groups, greedy = self.inner.collect_with_greedy(mine, n, on_episode) if mine else empty
        wall = self.inner.stats.get("wall_s", 0.0) if mine else 0.0
        parts = self.backend.gather_objects((groups, greedy, wall))
        world = self.backend.world_size
        gathered = interleave([p[0] for p in parts], world)
        self._stats = summarize(gathered) | {"wall_s": max(p[2] for p in parts)}
        return gathered, interleave([p[1] for p in parts], world)

    def evaluate(
        self, seeds: Sequence[Any], success_at: float, on_episode: EpisodeHook = None
    ) -> dict[str, float]:
        mine = self._mine(seeds)
        res = self.inner.evaluate(mine, success_at, on_episode) if mine else {"episodes": 0.0}
        parts = self.backend.gather_objects(res)
        episodes = sum(p["episodes"] for p in parts)
        out = {"episodes": episodes}
        for key in ("reward", "success_rate"):
            out[key] = sum(p.get(key, 0.0) * p["episodes"] for p in parts) / max(episodes, 1.0)
        return out

    def sync_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> float:
        return self.inner.sync_weights(named)

    def offload(self) -> None:
        self.inner.offload()

    def close(self) -> None:
        self.inner.close()
