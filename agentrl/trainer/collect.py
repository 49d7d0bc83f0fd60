"""How a step's groups are gathered: the `Collector` Protocol and the synchronous collector.

Why a component: the loop is the same whether a step's groups come from one synchronous
collect (this module), from a pipeline that keeps the next batches decoding while the step
trains (`agentrl.trainer.pipeline`), or from a producer elsewhere (a Ray actor, a harness).
What differs (when prompts are issued, how far the sampling policy may lag, what a checkpoint
must remember to resume) belongs to the collector, so `Trainer` calls these methods in the
same order for every mode and has no branch on it. `agentrl.assembly` picks the collector
from the config (`trainer.async`) and hands it to the `Trainer`; a new mode is a new class.

Order of calls: `load_state` (on resume), `start(step)` once before the first step, then per
step `next_batch` → `lag_metrics(batch)` (once the old log-probs exist) → `metrics(...)`
(after the update); `state()` at each checkpoint; `close()` at the end (idempotent).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentrl.report.progress import RunProgress
    from agentrl.rollout.runner import EpisodeHook
    from agentrl.types import Trajectory, TrajectoryGroup

    from .batch import TrainBatch
    from .components import RolloutRole, ScorerRole
    from .data import TaskSource


class Collector(Protocol):
    """Gathers each training step's groups of episodes (`agentrl.trainer.collect`)."""

    @property
    def notes(self) -> Sequence[str]:
        """Lines the run prints once at start (advice on the collector's settings)."""
        ...

    @property
    def stats(self) -> dict[str, float]:
        """Rollout stats of the last batch as first collected (before refills or filters)."""
        ...

    def start(self, step: int) -> None:
        """Called once before the first step (`step`: the steps already trained). The
        engine's weights are the policy's from here on (after SFT, a resume's sync)."""
        ...

    def next_batch(self, step: int, progress: RunProgress) -> list[TrajectoryGroup]:
        """The groups training step `step` trains on (the policy being updated is version
        `step - 1`), shaped by the scorer."""
        ...

    def lag_metrics(self, batch: TrainBatch) -> dict[str, float]:
        """Metrics of how far the sampling policy lags `batch.old_log_probs` (when computed),
        taken before the update touches the batch; `{}` where the groups are on-policy."""
        ...

    def metrics(
        self, step: int, groups: Sequence[TrajectoryGroup], update_spread: dict[str, float]
    ) -> dict[str, float]:
        """The step's collection metrics, after the update. `update_spread`: the IS ratio's
        mean/std where the update itself computed π_old (`algorithms.ratio_spread`)."""
        ...

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps so a resumed run continues without losing a prompt."""
        ...

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore from a checkpoint's state (any collector's: modes may change on resume)."""
        ...

    def close(self) -> None:
        """Stop whatever runs in the background; safe to call twice."""
        ...


class HeldOutEval(ABC):
    """A collector whose episodes the built-in env loop cannot reproduce (an agent program):
    the held-out eval runs through it instead of `RolloutRole.evaluate`, so what is measured
    is what is trained."""

    @abstractmethod
    def evaluate(
        self, items: Sequence[Any], success_at: float, on_episode: EpisodeHook = None
    ) -> dict[str, float]:
        """Greedy, one episode per held-out item: "reward", "success_rate", "episodes" (as
        `RolloutRole.evaluate`), and any counts of its own."""


# The checkpoint key of prompts issued but not trained (a pipelined run's); kept by name so
# checkpoints written before collectors existed resume unchanged.
PENDING_KEY = "async_pending"
# A pipelined checkpoint's groups in flight (`agentrl.trainer.inflight`, which owns it).
INFLIGHT_KEY = "async_inflight"


class SyncCollector:
    """The synchronous loop: each step rolls out the next `batch_size` prompts, `n` episodes
    each, and waits for all of them. With DAPO dynamic sampling (`resample_batches` > 0)
    groups without signal are dropped and refilled from further collects; greedy-baseline
    estimators (ReMax) get one greedy episode per prompt alongside."""

    def __init__(
        self,
        rollout: RolloutRole,
        scorer: ScorerRole,
        data: TaskSource,
        n: int,
        batch_size: int,
        *,
        greedy_baseline: bool = False,
        resample_batches: int = 0,
    ) -> None:
        self.rollout, self.scorer, self.data = rollout, scorer, data
        self.n, self.batch_size = n, batch_size
        self.greedy_baseline, self.resample_batches = greedy_baseline, resample_batches
        # engine update count - policy version (None: no engine this loop can read, or not
        # started; the groups keep the engine's counts then).
        self.offset: int | None = None
        self.pending: list[int] = []  # a pipelined checkpoint's untrained prompts
        self.notes: list[str] = []
        self._stats: dict[str, float] = {}
        # The engine's idle time between collects (the step's update, old log-probs, sync):
        # the end of the last collect, and the idle before the latest one.
        self._last_end: float | None = None
        self._idle: float | None = None

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    def start(self, step: int) -> None:
        """Read the version offset; a run resumed from a pipelined checkpoint rewinds its
        cursor to the oldest prompt that checkpoint had issued but not trained."""
        producer = self.rollout.producer
        if producer is None:  # Ray placement, sharded ranks: no engine this loop schedules on
            return
        self.offset = producer.weight_version - step
        rewind_to_pending(self.data, self.pending)

    def next_batch(self, step: int, progress: RunProgress) -> list[TrajectoryGroup]:
        t0 = time.perf_counter()
        self._idle = None if self._last_end is None else t0 - self._last_end
        groups = self.collect_once(step, progress)
        self._stats = dict(self.rollout.stats)
        kept = self.scorer.keep_informative(groups)
        for _ in range(self.resample_batches):
            if len(kept) >= self.batch_size:
                break
            kept += self.scorer.keep_informative(self.collect_once(step, progress))
        self._last_end = time.perf_counter()
        return (kept or groups)[: max(self.batch_size, 1)]

    def collect_once(self, step: int, progress: RunProgress) -> list[TrajectoryGroup]:
        """`n` shaped samples per prompt of the next data batch.

        For greedy-baseline estimators (ReMax) the same prompt list is also rolled out greedily
        and each group's rows carry their prompt's greedy reward, so the baseline stays with its
        group through DAPO filtering and refills. Costs one greedy episode per collected prompt.
        """
        items = self.data.next_batch()
        total = len(items) * (self.n + int(self.greedy_baseline))
        with progress.task(f"rollout {step}", total) as bar:
            hook = progress.callback(bar)
            if self.greedy_baseline:  # greedy episodes run alongside the samples (same engine)
                groups, greedy = self.rollout.collect_with_greedy(items, self.n, on_episode=hook)
                self.scorer.attach_greedy_baseline(groups, greedy)
            else:
                groups = self.rollout.collect(items, self.n, on_episode=hook)
        if self.offset is not None:
            stamp_versions(groups, self.offset)
        self.scorer.shape(groups)
        return groups

    def lag_metrics(self, batch: TrainBatch) -> dict[str, float]:
        return {}  # every token was sampled by the policy being updated

    def metrics(
        self, step: int, groups: Sequence[TrajectoryGroup], update_spread: dict[str, float]
    ) -> dict[str, float]:
        # The engine idles while the previous step trained (nothing runs beside the update).
        return {} if self._idle is None else {"span/rollout/idle": self._idle}

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        self.pending = list(state.get(PENDING_KEY, []))
        if kept := state.get(INFLIGHT_KEY):  # a pipelined checkpoint's groups in flight
            self.notes.append(
                f"resume: trainer.async is off, so the episodes of the {len(kept)} groups in "
                "flight at the checkpoint run again from their seed"
            )

    def close(self) -> None:
        pass


def rewind_to_pending(data: TaskSource, pending: Sequence[int]) -> None:
    """A run resumed from a pipelined checkpoint by a collector that issues prompts in order:
    the cursor goes back to the oldest prompt that checkpoint issued but did not train, so no
    prompt is skipped."""
    if pending:
        data.cursor = min([data.cursor, *pending])


# Trajectory metadata: how many leading tokens carry policy versions already (an episode a
# checkpoint kept was stamped by an earlier process, whose engine counted differently).
STAMPED = "policy_versions"


def stamp_versions(groups: Sequence[TrajectoryGroup], offset: int) -> None:
    """Engine update counts -> policy versions (optimizer steps applied to the weights that
    sampled each token); env tokens stay -1."""
    for g in groups:
        for t in g.trajectories:
            stamp_trajectory(t, offset)


def stamp_trajectory(t: Trajectory, offset: int) -> None:
    """`stamp_versions` of one trajectory: the tokens after its `STAMPED` prefix."""
    done = int(t.metadata.get(STAMPED, 0))
    t.weight_versions[done:] = [v - offset if v >= 0 else -1 for v in t.weight_versions[done:]]
    t.metadata[STAMPED] = len(t.weight_versions)
