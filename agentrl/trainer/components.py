"""What the Trainer is given: the role interfaces and the `Components` that hold one of each.

The Trainer composes roles; it never builds them (`agentrl.assembly` does, in this process or
as Ray proxies). The interfaces are `typing.Protocol`s, so a local role, a Ray proxy and the
sharded rollout satisfy them by their methods alone, checked by the type checker, with no
common base class to inherit.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agentrl.rollout.resume import EpisodeState
from agentrl.rollout.runner import EpisodeHook  # re-exported: the role Protocols' hook type

if TYPE_CHECKING:
    import torch

    from agentrl.backends import TrainingBackend
    from agentrl.chat import ChatFormat
    from agentrl.types import TrajectoryGroup

    from .batch import TrainBatch
    from .data import TaskSource


class ActorRole(Protocol):
    """The policy being trained (`trainer.actor.Actor`, `workers.ray_proxies.RayActor`)."""

    def compute_log_probs(self, batch: TrainBatch) -> torch.Tensor: ...

    def compute_sum_pi_squared(self, batch: TrainBatch) -> torch.Tensor: ...

    def update(
        self,
        batch: TrainBatch,
        generator: torch.Generator | None = None,
        kl_coef: float | None = None,
    ) -> dict[str, float]: ...

    def named_weights(self) -> Iterable[tuple[str, torch.Tensor]]: ...

    def sft(
        self, demos: list[Any], cfg: Any, pad_id: int, seed: int, log: Any = None
    ) -> list[float]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class ReferenceRole(Protocol):
    """The frozen initial policy for the KL term."""

    def compute_log_probs(self, batch: TrainBatch) -> torch.Tensor: ...

    def load_weights(self, weights: dict[str, torch.Tensor]) -> None: ...


class CriticRole(Protocol):
    """The value function for estimators whose registry entry says `needs_critic`."""

    def compute_values(self, batch: TrainBatch) -> torch.Tensor: ...

    def update(self, batch: TrainBatch) -> dict[str, float]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class GroupProducer(Protocol):
    """What `trainer.async` schedules on (`agentrl.trainer.pipeline`): one prompt's group of
    episodes at a time, finished groups back as futures, and the engine's weight-update
    count that stamps each sampled token, and what a checkpoint keeps of the groups in
    flight (`rollout.role.Rollout` in this process,
    `workers.process_rollout.ProcessRollout` in a child process)."""

    @property
    def weight_version(self) -> int: ...

    @property
    def reports_versions(self) -> bool: ...

    def start(self) -> None: ...

    def submit_group(
        self, task: Any, position: int, n: int, key: str, resume: Sequence[EpisodeState] = ()
    ) -> concurrent.futures.Future[TrajectoryGroup]:
        """`resume[k]`: what a checkpoint kept of sample k (`agentrl.rollout.resume`)."""
        ...

    def in_flight(self) -> dict[str, list[EpisodeState]]:
        """Per group key submitted and not finished: what a checkpoint keeps of each
        episode (finished trajectory, last turn boundary, or None), engine version counts."""
        ...


class RolloutRole(Protocol):
    """Engine + env pool (`rollout.role.Rollout`, `ShardedRollout`, `RayRollout`,
    `ProcessRollout`)."""

    @property
    def producer(self) -> GroupProducer | None:
        """The group producer a pipelined trainer uses; None where the engine is remote to
        this loop in a way it cannot schedule on (Ray, sharded ranks)."""
        ...

    @property
    def chat(self) -> ChatFormat: ...

    @property
    def stats(self) -> dict[str, float]: ...

    def collect(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> list[TrajectoryGroup]: ...

    def collect_with_greedy(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]: ...

    def evaluate(
        self, seeds: Sequence[Any], success_at: float, on_episode: EpisodeHook = None
    ) -> dict[str, float]: ...

    def sync_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> float: ...

    def offload(self) -> None: ...

    def close(self) -> None: ...


class ScorerRole(Protocol):
    """Rollout groups to a training batch (`trainer.roles.RewardScorer`)."""

    def keep_informative(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]: ...

    def shape(self, groups: list[TrajectoryGroup]) -> dict[str, float]: ...

    def attach_greedy_baseline(
        self, groups: list[TrajectoryGroup], greedy: list[TrajectoryGroup]
    ) -> None: ...

    def baseline_rewards(self, groups: list[TrajectoryGroup]) -> torch.Tensor: ...

    def batch(self, groups: list[TrajectoryGroup]) -> TrainBatch: ...

    def kl_in_reward(
        self,
        batch: TrainBatch,
        log_probs: torch.Tensor | None,
        ref: torch.Tensor,
        coef: float | None = None,
    ) -> dict[str, Any]: ...


@dataclass
class Components:
    """One of each role, wherever it runs, plus what the loop reads beside them."""

    backend: TrainingBackend
    tokenizer: Any
    actor: ActorRole
    reference: ReferenceRole | None
    critic: CriticRole | None
    rollout: RolloutRole
    scorer: ScorerRole
    data: TaskSource
    success_at: float
    # Builds one env of the run (the SFT bootstrap plays its demos on it).
    make_env: Callable[[], Any]
    # When assembling began: the run's setup time counts from here.
    started_at: float = field(default_factory=time.time)
    # Extra teardown (remote workers, placement groups) run after the rollout closes.
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Close the rollout, then the cleanup hooks, then the backend; each runs even when
        one before it raises (the first error is raised after all ran)."""
        steps = [self.rollout.close, *self.cleanup, self.backend.close]
        error: BaseException | None = None
        for fn in steps:
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - re-raised after the others ran
                error = error or e
        if error is not None:
            raise error
