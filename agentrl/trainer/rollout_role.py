"""The Rollout role: an engine plus the multi-turn runner, fed fresh weights after each update."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from agentrl.chat import ChatFormat
from agentrl.config import RolloutConfig, SamplingConfig
from agentrl.engines import Engine
from agentrl.rollout import RolloutRunner
from agentrl.types import TrajectoryGroup


class Rollout:
    def __init__(
        self,
        engine: Engine,
        chat: ChatFormat,
        env_factory: Callable[[], Any],
        rollout_cfg: RolloutConfig,
        sampling_cfg: SamplingConfig,
        seed: int | None = None,
    ) -> None:
        self.engine = engine
        self.chat = chat
        # Seeded: each (task, sample, turn) samples from its own stream, so runs reproduce.
        self.runner = RolloutRunner(engine, chat, env_factory, rollout_cfg, sampling_cfg, seed=seed)
        greedy = dataclasses.replace(sampling_cfg, temperature=0.0)
        self.eval_runner = RolloutRunner(engine, chat, env_factory, rollout_cfg, greedy)
        self.eval_runner._loop = None  # shares nothing with the training loop but the engine

    def collect(self, items: Sequence[Any], n: int) -> list[TrajectoryGroup]:
        return self.runner.collect_sync(items, n)

    @property
    def stats(self) -> dict[str, float]:
        return self.runner.last_stats

    def evaluate(self, seeds: Sequence[int], success_at: float) -> dict[str, float]:
        """Greedy, one episode per held-out seed: mean reward and success rate."""
        groups = self._on_train_loop(lambda: self.eval_runner.collect(seeds, 1))
        rewards = [t.reward for g in groups for t in g.trajectories]
        return {
            "reward": sum(rewards) / max(len(rewards), 1),
            "success_rate": sum(r >= success_at - 1e-9 for r in rewards) / max(len(rewards), 1),
            "episodes": float(len(rewards)),
        }

    def _on_train_loop(self, make_coro: Callable[[], Any]) -> Any:
        """Run on the training runner's loop: the engine's batching task lives there."""
        runner = self.runner
        if runner._loop is None or runner._loop.is_closed():
            import asyncio

            runner._loop = asyncio.new_event_loop()
        return runner._loop.run_until_complete(make_coro())

    def sync_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> float:
        t0 = time.perf_counter()
        self.engine.update_weights(named)
        return time.perf_counter() - t0

    def close(self) -> None:
        self._on_train_loop(self.engine.close)
        self.runner.close()
