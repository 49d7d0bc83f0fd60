"""Pipelined, partially asynchronous collection: `trainer.async.max_staleness: K >= 1`.

`PipelinedCollector` is a `Collector` (`agentrl.trainer.collect`); `agentrl.assembly` builds
it in place of the synchronous one, and the `Trainer` calls it the same way.

Why it exists: the synchronous loop waits for each step's slowest episode and leaves the
engine idle during the update. Here the rollout runner's event loop runs in its own thread
and keeps `prefetch_batches` (default K + 1) batches of prompts in flight. A step takes the
first `data.batch_size` groups that *finish* (completion order, not prompt order; under the
`wait` policy, room is kept for the groups the step must take, and finished groups beyond it
wait for the next step); the rest keep decoding while the step trains: episodes carry over into the next step (partial
rollouts). The new weights reach the engine through its `update_weights`, which takes the lock
the engine's decode steps hold, so the swap lands between two decode steps and the later
tokens of a running episode carry the new version (PipelineRL's in-flight update; the KV of
the tokens before the swap is kept).

Versions: the engine stamps each sampled token with its update count ("weight_versions"
feature); the collector rewrites it as the policy version (optimizer steps applied to the
weights that sampled it), so "versions behind" is `(step - 1) - version` at train time. What
keeps a trained group within K versions is the staleness policy (`trainer.async.staleness`,
`agentrl.trainer.staleness`): it decides how many prompts may be issued, which outstanding
groups a step must take, and whether a group that finished more than K behind is issued
again. The collector records each prompt's issue version (a lower bound on its group's
oldest token) for it. Every token keeps the engine's own logprob, so rollout correction
(`algorithm.tis_mode`) reweights the lag exactly.

Resume: the checkpoint records `pending` (prompts issued but not yet trained, in `state()`),
the policy's counters and, for each pending prompt, what its episodes had done
(`agentrl.trainer.inflight`: finished ones verbatim, running ones at their last turn boundary
from the producer's `in_flight`). After a restart those prompts are issued first, with
those states: finished episodes are kept, resumable ones continue, the others run again from
their seed; so no prompt is lost or trained twice, and no env step of a resumable env runs
twice (docs/async.md); a prompt the `drop` policy discarded is not pending. The producer
interface (`submit` a prompt, get a finished group back) is what a Ray rollout actor
implements for split placement.
"""

from __future__ import annotations

import collections
import concurrent.futures
import queue
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from agentrl.config import AsyncConfig
from agentrl.rollout.runner import summarize
from agentrl.types import TrajectoryGroup

from .collect import INFLIGHT_KEY, PENDING_KEY, stamp_versions
from .components import GroupProducer
from .data import TaskSource
from .inflight import RESUME_KEY, ResumeLedger, in_policy_versions, stored
from .staleness import StalenessPolicy

# The checkpoint key of the staleness policy's cumulative counters.
COUNTS_KEY = "async_stale_counts"

if TYPE_CHECKING:
    from agentrl.report.progress import RunProgress

    from .batch import TrainBatch


class PipelinedCollector:
    """The `Collector` of a pipelined trainer: prompts in, finished groups out, through a
    `GroupProducer` that decodes in the background, paced by a `StalenessPolicy`."""

    def __init__(
        self,
        producer: GroupProducer,
        data: TaskSource,
        n: int,
        batch_size: int,
        cfg: AsyncConfig,
        policy: StalenessPolicy,
        *,
        concurrency: int,
        engine_batch: int,
    ) -> None:
        """`concurrency`, `engine_batch`: `rollout.concurrency` and `engine.max_batch_size`,
        the episodes that run at once (`notes` advises when the pipeline issues more)."""
        self.producer, self.data, self.n, self.batch_size = producer, data, n, max(batch_size, 1)
        self.policy, self.timeout_s = policy, cfg.batch_timeout_s
        self.depth = (cfg.prefetch_batches or cfg.max_staleness + 1) * self.batch_size
        self.notes = [*advice(policy.most_outstanding(self.depth) * n, concurrency, engine_batch)]
        # engine update count - policy version, set by `start`: both move by one per step.
        self.offset: int | None = None
        self.requeue: collections.deque[int] = collections.deque()
        self.inflight: dict[int, concurrent.futures.Future[TrajectoryGroup]] = {}
        self.done: queue.Queue[int] = queue.Queue()
        # Finished (stamped) groups a step left for a later one (`wait`), in finishing order.
        self.held: dict[int, TrajectoryGroup] = {}
        self.issued_at: dict[int, int] = {}  # outstanding prompt -> its issue version
        self.trained = 0  # prompts trained so far (set by `start`), for admission
        self.ledger = ResumeLedger()  # groups a checkpoint kept, not issued again yet
        self._stats: dict[str, float] = {}

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    @property
    def outstanding(self) -> int:
        """Prompts issued and neither trained nor dropped (running, finished or held)."""
        return len(self.issued_at)

    def start(self, step: int) -> None:
        """Read the version offset and start the producer; prompts a resumed checkpoint left
        pending are issued first (`load_state`)."""
        if not self.producer.reports_versions:
            raise ValueError(
                "trainer.async.max_staleness: the rollout engine does not report per-token "
                "weight versions; use engine.kind: hf or vllm"
            )
        self.offset = self.producer.weight_version - step
        self.trained = step * self.batch_size
        self.producer.start()

    # ---------------------------------------------------------------- producer
    def top_up(self, version: int) -> None:
        """Issue prompts (re-queued ones first) up to `depth` outstanding, as far as the
        policy admits them at `version`."""
        wanted = self.depth - self.outstanding
        for _ in range(self.policy.admit(version, self.trained, self.outstanding, wanted)):
            if self.requeue:
                k = self.requeue.popleft()
            else:
                k, self.data.cursor = self.data.cursor, self.data.cursor + 1
            self._issue(k, version)

    def _issue(self, k: int, version: int) -> None:
        assert self.offset is not None  # set by `start`, before any prompt is issued
        resume: list[Any] = []
        if (kept := self.ledger.take(k)) is not None:  # a checkpoint kept its episodes
            version, resume = kept  # its issue version bounds the kept tokens too
        fut = self.producer.submit_group(
            self.data.item_at(k), k % self.batch_size, self.n, f"p{k}-", resume
        )
        self.inflight[k], self.issued_at[k] = fut, version

        def finished(_f: concurrent.futures.Future[Any]) -> None:
            self.done.put(k)

        fut.add_done_callback(finished)

    # ---------------------------------------------------------------- consumer
    def next_batch(self, step: int, progress: RunProgress) -> list[TrajectoryGroup]:
        """`batch_size` finished groups for training step `step` (policy version step - 1),
        none more than K versions behind. Issued here at version step - 1, the prompts are
        trained within K steps; those left outstanding roll while this batch trains."""
        if self.offset is None:
            raise RuntimeError("PipelinedCollector.next_batch before start()")
        version = step - 1
        self.policy.begin_step()
        self.top_up(version)
        owed = {k for k, v in self.issued_at.items() if self.policy.due(version, v)}
        carried, self.held = collections.deque(self.held.items()), {}
        out: list[TrajectoryGroup] = []
        waiting_since: float | None = None  # when B groups had finished, if owed ones had not
        waited = 0
        deadline = time.monotonic() + self.timeout_s
        while len(out) < self.batch_size:
            k, group = carried.popleft() if carried else self._next_finished(deadline)
            if self.policy.too_stale(version, group):
                del self.issued_at[k]
                owed.discard(k)
                if self.policy.on_stale():
                    self.requeue.appendleft(k)
                self.top_up(version)
                continue
            if k not in owed and len(out) + len(owed) >= self.batch_size:
                self.held[k] = group  # the rest of the batch is owed to older groups
                if waiting_since is None:
                    waiting_since = time.monotonic()
                continue
            if k in owed:
                owed.discard(k)
                waited += 1 if waiting_since is not None else 0
            del self.issued_at[k]
            out.append(group)
        self.held = dict(carried) | self.held  # finished earlier: first again next step
        wait_s = 0.0 if waiting_since is None else time.monotonic() - waiting_since
        self.policy.waited(wait_s, waited)
        self.trained += len(out)
        self._stats = summarize(out)
        return out

    def _next_finished(self, deadline: float) -> tuple[int, TrajectoryGroup]:
        """The next group to finish, stamped; waits until `deadline`."""
        try:
            k = self.done.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            raise TimeoutError(
                f"trainer.async: no batch of {self.batch_size} finished groups within "
                f"trainer.async.batch_timeout_s={self.timeout_s}s"
            ) from None
        group = self.inflight.pop(k).result()
        self.stamp(group, k)
        return k, group

    def stamp(self, group: TrajectoryGroup, k: int) -> None:
        """Engine update counts -> policy versions; the prompt's index for resume/audit."""
        assert self.offset is not None  # set by `start`, before any prompt is issued
        stamp_versions([group], self.offset)
        for t in group.trajectories:
            t.metadata["prompt_index"] = k

    @property
    def pending(self) -> list[int]:
        """Prompts issued but not trained (running, finished and held, or queued to run
        again): what a resumed run issues again first."""
        return sorted([*self.issued_at, *self.requeue])

    def lag_metrics(self, batch: TrainBatch) -> dict[str, float]:
        if batch.old_log_probs is None:  # one on-policy pass: the update logs the spread
            return {}
        return is_spread(batch.old_log_probs, batch.rollout_log_probs, batch.response_mask)

    def metrics(
        self, step: int, groups: Sequence[TrajectoryGroup], update_spread: dict[str, float]
    ) -> dict[str, float]:
        m = {f"async/{k}": v for k, v in update_spread.items()}
        m |= self.ledger.metrics()
        return m | version_metrics(groups, step - 1) | self.policy.metrics()

    def state(self) -> dict[str, Any]:
        # Issued, not trained: re-issued first on resume, with what their episodes had done;
        # the policy's and the resume's cumulative counters.
        kept = self.kept_now() | {k: stored(v, s) for k, (v, s) in self.ledger.groups.items()}
        return {
            PENDING_KEY: self.pending,
            COUNTS_KEY: self.policy.state(),
            INFLIGHT_KEY: kept,
            RESUME_KEY: self.ledger.state(),
        }

    def kept_now(self) -> dict[int, dict[str, Any]]:
        """What a checkpoint keeps of each outstanding group (`agentrl.trainer.inflight`),
        in policy versions: held groups as trained, finished ones from their future, running
        ones from the producer's book. A producer that cannot say (it died) leaves those
        episodes to start again from their seed, counted in `snapshot_errors`."""
        if not self.issued_at:
            return {}
        assert self.offset is not None
        try:
            running = self.producer.in_flight() if self.inflight else {}
        except Exception:  # noqa: BLE001 - counted; those episodes run again from the seed
            running, self.ledger.snapshot_errors = {}, self.ledger.snapshot_errors + 1
        out: dict[int, dict[str, Any]] = {}
        for k, version in self.issued_at.items():
            if k in self.held:  # stamped already
                states = in_policy_versions(self.held[k].trajectories, self.offset)
            elif f"p{k}-" in running:
                states = in_policy_versions(running[f"p{k}-"], self.offset)
            else:  # finished after the book was read, or before: its future has it
                states = self._finished_states(k)
            out[k] = stored(version, states)
        return out

    def _finished_states(self, k: int) -> list[Any]:
        assert self.offset is not None
        fut = self.inflight.get(k)
        try:
            group = fut.result(timeout=self.timeout_s) if fut is not None else None
        except BaseException:  # noqa: BLE001 - cancelled or failed: it runs again
            group = None
        return [] if group is None else in_policy_versions(group.trajectories, self.offset)

    def load_state(self, state: dict[str, Any]) -> None:
        self.requeue = collections.deque(state.get(PENDING_KEY, []))
        self.policy.load_state(state.get(COUNTS_KEY, {}))
        kept, counts = state.get(INFLIGHT_KEY, {}), state.get(RESUME_KEY, {})
        self.notes += self.ledger.load(kept, counts)

    def close(self) -> None:
        """Cancel the episodes still running; their prompts, and those of finished groups
        not trained, stay `pending`, and what their episodes had done is kept for a
        checkpoint written afterwards (`kept_now`, taken before the cancel)."""
        for k, entry in self.kept_now().items():
            self.ledger.groups[k] = (entry["issued_at"], entry["episodes"])
        for fut in self.inflight.values():
            fut.cancel()
        for fut in self.inflight.values():
            try:
                fut.result(timeout=30)
            except BaseException:  # noqa: BLE001 - cancelled or failed: being discarded
                pass
        self.requeue.extend(sorted(self.issued_at))
        self.inflight.clear()
        self.held.clear()
        self.issued_at.clear()


def version_metrics(groups: Sequence[TrajectoryGroup], version: int) -> dict[str, float]:
    """Staleness of a step's sampled tokens against the policy being updated (`version`):
    mean/max versions behind, the share of tokens sampled by an older policy, and the widest
    version span inside one group."""
    behind: list[int] = []
    span = 0
    for g in groups:
        vs = [v for t in g.trajectories for v in t.weight_versions if v >= 0]
        if vs:
            span = max(span, max(vs) - min(vs))
        behind += [version - v for v in vs]
    if not behind:
        return {}
    return {
        "async/staleness_mean": sum(behind) / len(behind),
        "async/staleness_max": float(max(behind)),
        "async/off_policy_token_share": sum(b > 0 for b in behind) / len(behind),
        "async/group_version_span_max": float(span),
    }


def is_spread(old: torch.Tensor, rollout: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Spread of the per-token IS ratio π_old/π_rollout over sampled tokens (the lag's size
    that rollout correction sees)."""
    m = mask.bool()
    if not m.any():
        return {}
    rho = (old - rollout)[m].clamp(-20, 20).exp().double()
    return {
        "async/is_ratio_std": float(rho.std()) if rho.numel() > 1 else 0.0,
        "async/is_ratio_min": float(rho.min()),
        "async/is_ratio_max": float(rho.max()),
    }


def advice(issued: int, concurrency: int, engine_batch: int) -> tuple[str, ...]:
    """A hint when the pipeline keeps more episodes issued than `rollout.concurrency` /
    `engine.max_batch_size` let run at once: a tool-latency workload is bounded by the
    episodes in flight (docs/async.md, "In flight")."""
    running = min(concurrency, engine_batch)
    if running >= issued:
        return ()
    return (
        f"trainer.async: {issued} episodes are kept issued, but rollout.concurrency="
        f"{concurrency} / engine.max_batch_size={engine_batch} run at most {running} at "
        f"once; raise both to {issued} to let the pipeline overlap them",
    )
