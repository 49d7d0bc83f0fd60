"""The harness collector: each step's groups come from an agent program, run unchanged.

A `Collector` (`agentrl.trainer.collect`) that `agentrl.assembly` picks when
`rollout.harness.agent` or `.command` is set. It hosts the recording gateway on the rollout's
engine and event loop (`rollout.gateway_host`), and per step runs `rollout.n` agent episodes
for each of the next `data.batch_size` tasks (`rollout.harness`), so GRPO's groups are n
runs of one task. The groups hold the recorded segments of the episodes that ran; episodes
that failed for the machine's sake (crash, timeout, engine error) are counted, logged and
kept out of the groups, never trained as reward 0. A task left with too few finished runs is
dropped by the one group rule (`exclusion.trainable`: fewer than two under a group-relative
estimator; a split episode's segments are one run). Segments of one split episode share its
reward; the batch's `episode_index` (from `metadata["episode"]`) makes them one sample.

The held-out eval runs the same program (`evaluate`, the `HeldOutEval` capability): one
episode per held-out task on a gateway of its own whose default temperature is 0 (greedy,
unless the program asks for a temperature itself), scored by the same grader. An episode that
failed for the machine's sake counts as not solved there (a held-out score never drops a
task) and is counted apart (`harness/infra_failed`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentrl.config import ConfigError
from agentrl.config.schema import HarnessConfig
from agentrl.rollout.gateway_host import GatewayHost
from agentrl.rollout.harness import Episode, Harness, warm_parent
from agentrl.rollout.role import Rollout
from agentrl.rollout.runner import summarize
from agentrl.rollout.warm_parent import READY_TIMEOUT_S, ParentError
from agentrl.types import TrajectoryGroup

from .collect import PENDING_KEY, HeldOutEval, rewind_to_pending
from .data import TaskSource
from .exclusion import min_runs, trainable

if TYPE_CHECKING:
    from agentrl.config.schema import SamplingConfig
    from agentrl.report.progress import RunProgress
    from agentrl.rollout.runner import EpisodeHook

    from .batch import TrainBatch
    from .components import ScorerRole

START_TIMEOUT_S = 120.0


class HarnessCollector(HeldOutEval):
    """Gathers each step's groups by running the user's agent against an in-process gateway,
    and runs the held-out eval through the same agent."""

    notes: Sequence[str] = ()

    def __init__(
        self,
        rollout: Rollout,
        scorer: ScorerRole,
        data: TaskSource,
        cfg: HarnessConfig,
        sampling: SamplingConfig,
        make_env: Any,
        *,
        n: int,
        batch_size: int,
        concurrency: int,
        group_relative: bool,
        tokenizer_name: str | None = None,
    ) -> None:
        self.rollout, self.scorer, self.data, self.cfg = rollout, scorer, data, cfg
        self.sampling, self.make_env = sampling, make_env
        self.n, self.batch_size, self.concurrency = n, batch_size, concurrency
        self.group_relative, self.tokenizer_name = group_relative, tokenizer_name
        self.host: GatewayHost | None = None
        self.harness: Harness | None = None
        # One warm parent (rollout.harness.preload) for every run, eval ones too; its first
        # run starts it; close() stops it.
        self.parent = warm_parent(cfg)
        self.pending: list[int] = []
        self.failed: list[Episode] = []  # the last step's infra failures
        self.dropped = 0  # groups of the last step left with too few episodes
        self._stats: dict[str, float] = {}

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    def start(self, step: int) -> None:
        """Run the rollout's loop in its thread and serve the gateway on it."""
        self.host = self._serve(self.sampling)
        self._start_parent()
        self.harness = Harness(self.host, self.cfg, self.make_env, self.parent)
        rewind_to_pending(self.data, self.pending)

    def _serve(self, sampling: SamplingConfig) -> GatewayHost:
        """A gateway on the rollout's engine, served on the runner's loop (in its thread)."""
        runner = self.rollout.runner
        runner.start_background()
        host = GatewayHost(
            self.rollout.engine,
            self.rollout.chat,
            sampling,
            tokenizer_name=self.tokenizer_name,
            request_timeout_s=self.cfg.timeout_s,
            force_first_tool_call=self.cfg.force_first_tool_call,
        )
        runner.submit(host.start()).result(timeout=START_TIMEOUT_S)
        return host

    def _limit_s(self, episodes: int) -> float:
        """How long a collect of `episodes` runs may take: every run is bounded by
        timeout_s; scoring and the engine's queue get the same again."""
        waves = math.ceil(episodes / max(self.concurrency, 1))
        return 2 * waves * self.cfg.timeout_s + 60

    def evaluate(
        self, items: Sequence[Any], success_at: float, on_episode: EpisodeHook = None
    ) -> dict[str, float]:
        """One greedy agent episode per held-out task, on a gateway of its own (started and
        stopped here: the eval runs before `start` and after `close` too)."""
        host = self._serve(dataclasses.replace(self.sampling, temperature=0.0))
        runner = self.rollout.runner
        try:
            self._start_parent()
            harness = Harness(host, self.cfg, self.make_env, self.parent)
            coro = harness.collect(
                items, 1, prefix="eval-", concurrency=self.concurrency, on_episode=on_episode
            )
            groups, failed = runner.submit(coro).result(timeout=self._limit_s(len(items)))
        finally:
            _stop(runner, host)
            if self.host is None:  # not started yet, or closed: nothing else runs agents
                self._stop_parent()
        return held_out_result(groups, failed, len(items), success_at)

    def next_batch(self, step: int, progress: RunProgress) -> list[TrajectoryGroup]:
        if self.harness is None:
            raise RuntimeError("HarnessCollector.next_batch before start()")
        items = self.data.next_batch()
        episodes = len(items) * self.n
        limit = self._limit_s(episodes)
        with progress.task(f"agent runs {step}", episodes) as bar:
            coro = self.harness.collect(
                items,
                self.n,
                prefix=f"s{step}-",
                concurrency=self.concurrency,
                on_episode=progress.callback(bar),
            )
            groups, self.failed = self.rollout.runner.submit(coro).result(timeout=limit)
        version = step - 1  # every token was sampled by the policy being updated
        for g in groups:
            for t in g.trajectories:
                t.weight_versions = [version if m else -1 for m in t.loss_mask]
        need = min_runs(group_relative=self.group_relative)
        kept = [g for g in groups if trainable(g.trajectories, group_relative=self.group_relative)]
        self.dropped = len(groups) - len(kept)
        if not kept:
            first = self.failed[0].record.metadata.get("error") if self.failed else None
            raise RuntimeError(
                f"step {step}: no task has {need} agent run(s) that finished "
                f"({len(self.failed)} of {episodes} failed; first: {str(first)[:500]})"
            )
        self.scorer.shape(kept)
        self._stats = summarize(kept)
        return self.scorer.keep_informative(kept) or kept

    def lag_metrics(self, batch: TrainBatch) -> dict[str, float]:
        return {}  # synchronous: every token was sampled by the policy being updated

    def metrics(
        self, step: int, groups: Sequence[TrajectoryGroup], update_spread: dict[str, float]
    ) -> dict[str, float]:
        return harness_metrics(groups, self.failed, self.dropped)

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        self.pending = list(state.get(PENDING_KEY, []))

    def close(self) -> None:
        if self.host is not None:
            host, self.host = self.host, None
            _stop(self.rollout.runner, host)
        self._stop_parent()

    def _start_parent(self) -> None:
        """A preload that cannot be imported is one error at start, not a crash per run."""
        if self.parent is None:
            return
        try:
            self.rollout.runner.submit(self.parent.start()).result(timeout=READY_TIMEOUT_S + 30)
        except ParentError as e:
            raise ConfigError(str(e)) from e

    def _stop_parent(self) -> None:
        if self.parent is not None:
            try:
                self.rollout.runner.submit(self.parent.close()).result(timeout=60)
            except Exception:  # noqa: BLE001 - the loop may be gone; its stdin's EOF stops it
                pass


def _stop(runner: Any, host: GatewayHost) -> None:
    try:
        runner.submit(host.stop()).result(timeout=60)
    except Exception:  # noqa: BLE001 - the loop may be gone already (closing)
        host.sock.close()


def held_out_result(
    groups: Sequence[TrajectoryGroup], failed: Sequence[Episode], tasks: int, success_at: float
) -> dict[str, float]:
    """Reward and success over every held-out task: a run that failed for the machine's sake
    scores 0 here (it is counted in `harness/infra_failed`), so no task drops out of the score.
    A task's reward is its episode's (its segments all carry it); its tool calls are those the
    model wrote in all its segments (each generated turn is recorded in one segment)."""
    trajs = [t for g in groups for t in g.trajectories]
    rewards = {str(t.metadata.get("episode")): t.reward for t in trajs}
    n = max(tasks, 1)
    out = {
        "reward": sum(rewards.values()) / n,
        "success_rate": sum(r >= success_at - 1e-9 for r in rewards.values()) / n,
        "tool_calls": sum(len(u.tool_calls) for t in trajs for u in t.turns) / n,
        "episodes": float(tasks),
        "harness/infra_failed": float(len(failed)),
    }
    for reason, count in collections.Counter(e.failure for e in failed).items():
        out[f"harness/failed/{reason}"] = float(count)
    return out


def harness_metrics(
    groups: Sequence[TrajectoryGroup], failed: Sequence[Episode], dropped: int
) -> dict[str, float]:
    """Episodes trained, split episodes and their segments, infra failures by reason."""
    segs_per_episode: collections.Counter[str] = collections.Counter(
        str(t.metadata.get("episode")) for g in groups for t in g.trajectories
    )
    episodes = len(segs_per_episode)
    m: dict[str, float] = {
        "harness/episodes": float(episodes),
        "harness/segments": float(sum(segs_per_episode.values())),
        "harness/split_episodes": float(sum(c > 1 for c in segs_per_episode.values())),
        "harness/infra_failed": float(len(failed)),
        "harness/groups_dropped": float(dropped),
    }
    if episodes:
        m["harness/segments_per_episode"] = m["harness/segments"] / episodes
    for reason, count in collections.Counter(e.failure for e in failed).items():
        m[f"harness/failed/{reason}"] = float(count)
    return m
