"""The Rollout role: an engine plus the multi-turn runner, fed fresh weights after each update.

What the trainer calls (`trainer.components.RolloutRole`): sampled, greedy and evaluation
collects from synchronous code, episode hooks for progress, weight sync and close. It lives
beside the runner it drives; `agentrl.assembly` builds it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import torch

from agentrl.chat import ChatFormat
from agentrl.config import RolloutConfig, SamplingConfig
from agentrl.engines import Engine
from agentrl.rollout.resume import EpisodeState
from agentrl.rollout.runner import EpisodeHook, RolloutRunner, summarize
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
        sleeps: bool = False,
    ) -> None:
        self.engine = engine
        # engine.sleep_between_phases: `offload()` sleeps the engine, the next use wakes it.
        self.sleeps, self._asleep = sleeps, False
        self.chat = chat
        # Seeded: each (task, sample, turn) samples from its own stream, so runs reproduce.
        self.runner = RolloutRunner(engine, chat, env_factory, rollout_cfg, sampling_cfg, seed=seed)
        self.greedy = dataclasses.replace(sampling_cfg, temperature=0.0)
        self._stats: dict[str, float] = {}

    def collect(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> list[TrajectoryGroup]:
        """`n` sampled episodes per item; `on_episode(traj)` as each one ends (progress)."""
        self._wake()
        with self._hook(on_episode):
            groups = self.runner.collect_sync(items, n)
        self._stats = dict(self.runner.last_stats)
        return groups

    @contextlib.contextmanager
    def _hook(self, on_episode: EpisodeHook) -> Iterator[None]:
        previous, self.runner.on_episode = self.runner.on_episode, on_episode
        try:
            yield
        finally:
            self.runner.on_episode = previous

    @property
    def stats(self) -> dict[str, float]:
        """Stats of the last sampled `collect`; greedy calls (eval, baseline) leave them be."""
        return self._stats

    def collect_greedy(self, items: Sequence[Any]) -> list[TrajectoryGroup]:
        """One greedy episode per item, in item order: ReMax's baseline for those prompts.

        Pass the very list given to `collect` so each episode resets its env with the same
        task, seed and position as the group it baselines (dataset rows reset by position).
        """
        self._wake()
        return self.runner.collect_sync(items, 1, sampling_cfg=self.greedy)

    def collect_with_greedy(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]:
        """`collect(items, n)` and `collect_greedy(items)` at the same time on one engine:
        ReMax's baseline episodes ride along with the samples instead of adding a serial
        round of episode latency after them."""
        runner = self.runner
        self._wake()
        t0 = time.monotonic()

        async def both() -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]:
            sampled = runner.collect(items, n)
            greedy = runner.collect(items, 1, sampling_cfg=self.greedy)
            return tuple(await asyncio.gather(sampled, greedy))  # type: ignore[return-value]

        with self._hook(on_episode):
            groups, greedy = runner.run_sync(both())
        self._stats = summarize(groups) | {"wall_s": time.monotonic() - t0}
        return groups, greedy

    def evaluate(
        self, seeds: Sequence[Any], success_at: float, on_episode: EpisodeHook = None
    ) -> dict[str, float]:
        """Greedy, one episode per held-out seed (or validation row): reward, success and
        tool calls per episode."""
        self._wake()
        with self._hook(on_episode):
            groups = self.runner.collect_sync(seeds, 1, sampling_cfg=self.greedy)
        trajs = [t for g in groups for t in g.trajectories]
        rewards = [t.reward for t in trajs]
        n = max(len(rewards), 1)
        return {
            "reward": sum(rewards) / n,
            "success_rate": sum(r >= success_at - 1e-9 for r in rewards) / n,
            "episodes": float(len(rewards)),
            "tool_calls": sum(len(u.tool_calls) for t in trajs for u in t.turns) / n,
        }

    # ---------------------------------------------------------------- group producer
    # `trainer.components.GroupProducer`: what a pipelined trainer schedules on.
    @property
    def producer(self) -> Rollout:
        return self

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    @property
    def reports_versions(self) -> bool:
        return "weight_versions" in self.engine.features

    def start(self) -> None:
        """From now on the runner's loop runs on its own thread (`submit_group`)."""
        self.runner.start_background()

    def submit_group(
        self, task: Any, position: int, n: int, key: str, resume: Sequence[EpisodeState] = ()
    ) -> concurrent.futures.Future[TrajectoryGroup]:
        """`n` episodes of `task` as one group, scheduled now, finished in the future;
        `resume`: what a checkpoint kept of each episode (`rollout.resume`)."""
        return self.runner.submit(self.runner.collect_group(task, position, n, key, resume))

    def in_flight(self) -> dict[str, list[EpisodeState]]:
        """What a checkpoint keeps of the groups in flight, by key (`RolloutRunner.in_flight`)."""
        return self.runner.in_flight()

    def sync_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> float:
        t0 = time.perf_counter()
        self._wake()
        self.engine.update_weights(named)
        return time.perf_counter() - t0

    def offload(self) -> None:
        """The trainer's update phase starts: with `engine.sleep_between_phases`, free the
        engine's accelerator memory (`engine.sleep()`); the next collect, evaluate or weight
        sync wakes it first. A no-op otherwise."""
        if self.sleeps and not self._asleep:
            self.engine.sleep()
            self._asleep = True

    def _wake(self) -> None:
        if self._asleep:
            self.engine.wake()
            self._asleep = False

    def close(self) -> None:
        self.runner.close(close_engine=True)  # on the loop where the engine's task lives
