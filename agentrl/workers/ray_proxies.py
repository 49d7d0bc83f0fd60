"""Driver-side stand-ins for roles living in Ray actors: same methods as the local roles.

Weights never pass through the driver: `RayActor.named_weights()` returns a `WeightsRef` to
the learner's state dict in the object store, which `RayRollout.sync_weights` hands straight to
the rollout worker (Ray resolves the reference there). Iterating a `WeightsRef` fetches it, so
code written for local roles (the SFT bootstrap) still works.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import ray
import torch

from agentrl.chat import ChatFormat
from agentrl.trainer.batch import TrainBatch
from agentrl.types import TrajectoryGroup

from ._futures import FutureTable


class WeightsRef:
    def __init__(self, ref: ray.ObjectRef) -> None:
        self.ref = ref

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return iter(ray.get(self.ref).items())


def _object(named: Iterable[tuple[str, torch.Tensor]]) -> ray.ObjectRef:
    if isinstance(named, WeightsRef):
        return named.ref
    return ray.put({k: v.detach().cpu() for k, v in named})


class RayActor:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def compute_log_probs(self, batch: TrainBatch) -> torch.Tensor:
        return ray.get(self.handle.log_probs.remote(batch))

    def compute_sum_pi_squared(self, batch: TrainBatch) -> torch.Tensor:
        return ray.get(self.handle.sum_pi_squared.remote(batch))

    def update(
        self,
        batch: TrainBatch,
        generator: torch.Generator | None = None,
        kl_coef: float | None = None,
    ) -> dict[str, float]:
        gen = generator or torch.Generator()
        metrics, state = ray.get(self.handle.update.remote(batch, gen.get_state(), kl_coef))
        gen.set_state(state)
        return metrics

    def named_weights(self) -> WeightsRef:
        return WeightsRef(self.handle.named_weights.remote())

    def sft(
        self, demos: list[Any], cfg: Any, pad_id: int, seed: int, log: Any = None
    ) -> list[float]:
        """`log(step, loss)` runs here once the remote SFT returns (no streaming)."""
        losses = ray.get(self.handle.sft.remote(demos, cfg, pad_id, seed))
        for step, loss in enumerate(losses):
            if log is not None:
                log(step, loss)
        return losses

    def state(self) -> dict[str, Any]:
        return ray.get(self.handle.state.remote())

    def load_state(self, state: dict[str, Any]) -> None:
        ray.get(self.handle.load_state.remote(state))


class RayReference:
    """The reference lives in the learner's process (colocated with the actor)."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def compute_log_probs(self, batch: TrainBatch) -> torch.Tensor:
        return ray.get(self.handle.ref_log_probs.remote(batch))

    def load_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]] | dict[str, torch.Tensor]
    ) -> None:
        items = weights.items() if isinstance(weights, dict) else weights
        ray.get(self.handle.ref_load_weights.remote(_object(items)))


class RayCritic:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def _call(self, method: str, *args: Any) -> Any:
        return ray.get(self.handle.critic_call.remote(method, *args))

    def compute_values(self, batch: TrainBatch) -> torch.Tensor:
        return self._call("compute_values", batch)

    def update(self, batch: TrainBatch) -> dict[str, float]:
        return self._call("update", batch)

    def state(self) -> dict[str, Any]:
        return self._call("state")

    def load_state(self, state: dict[str, Any]) -> None:
        self._call("load_state", state)


def _replay(groups: list[TrajectoryGroup], on_episode: Any) -> None:
    for t in (t for g in groups for t in g.trajectories) if on_episode is not None else ():
        on_episode(t)


class RayRollout:
    def __init__(self, handle: Any, chat: ChatFormat) -> None:
        self.handle, self.chat = handle, chat
        self._stats: dict[str, float] = {}
        self._producer: RayGroupProducer | None = None

    @property
    def producer(self) -> RayGroupProducer:
        """The rollout actor as a pipelined trainer's group producer (`trainer.async`)."""
        if self._producer is None:
            self._producer = RayGroupProducer(self.handle)
        return self._producer

    def collect(
        self, items: Sequence[Any], n: int, on_episode: Any = None
    ) -> list[TrajectoryGroup]:
        """`on_episode` runs here per episode once the remote collect returns (no streaming)."""
        groups, self._stats = ray.get(self.handle.collect.remote(list(items), n))
        _replay(groups, on_episode)
        return groups

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    def collect_with_greedy(
        self, items: Sequence[Any], n: int, on_episode: Any = None
    ) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]:
        groups, greedy, self._stats = ray.get(
            self.handle.collect_with_greedy.remote(list(items), n)
        )
        _replay([*groups, *greedy], on_episode)
        return groups, greedy

    def evaluate(
        self, seeds: Sequence[Any], success_at: float, on_episode: Any = None
    ) -> dict[str, float]:
        result = ray.get(self.handle.evaluate.remote(list(seeds), success_at))
        for _ in range(len(seeds) if on_episode is not None else 0):
            on_episode(None)
        return result

    def sync_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> float:
        """Seconds until the engine holds the new weights, transfer included."""
        t0 = time.perf_counter()
        ray.get(self.handle.sync_weights.remote(_object(named)))
        if self._producer is not None:
            self._producer.synced()
        return time.perf_counter() - t0

    def offload(self) -> None:
        ray.get(self.handle.offload.remote())

    def close(self) -> None:
        if self._producer is not None:
            self._producer.stop()
        ray.get(self.handle.close.remote())
        ray.kill(self.handle)


class RayGroupProducer:
    """`trainer.components.GroupProducer` over the rollout actor: groups are submitted without
    waiting, and a poller thread here resolves their futures from the actor's finished
    groups. The actor's calls all return at once, so weight syncs are never stuck behind a
    running group; a sync counts as a new version once `RayRollout.sync_weights` returns (the
    actor has applied it)."""

    POLL_S = 0.05

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        versions, self._version = ray.get(handle.producer_info.remote())
        self.reports_versions: bool = versions
        self._ids = itertools.count()
        self._calls = FutureTable("rollout actor")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def weight_version(self) -> int:
        return self._version

    def synced(self) -> None:
        self._version += 1

    def start(self) -> None:
        if self._thread is not None:
            return
        ray.get(self.handle.start_producer.remote())
        self._thread = threading.Thread(target=self._poll, name="agentrl-ray-groups", daemon=True)
        self._thread.start()

    def submit_group(
        self, task: Any, position: int, n: int, key: str, resume: Sequence[Any] = ()
    ) -> concurrent.futures.Future[TrajectoryGroup]:
        rid = next(self._ids)
        fut: concurrent.futures.Future[TrajectoryGroup] = self._calls.add(rid)
        # ordered per caller
        self.handle.submit_group.remote(rid, task, position, n, key, list(resume))

        def cancelled(f: concurrent.futures.Future[TrajectoryGroup]) -> None:
            if f.cancelled() and not self._stop.is_set():
                self.handle.cancel_group.remote(rid)

        fut.add_done_callback(cancelled)
        return fut

    def in_flight(self) -> dict[str, list[Any]]:
        """The actor's groups in flight (`RolloutRunner.in_flight`)."""
        return ray.get(self.handle.in_flight.remote(), timeout=600)  # type: ignore[no-any-return]

    def _poll(self) -> None:
        """Resolve futures from the actor until stopped; an actor that fails fails them all."""
        while not self._stop.is_set():
            try:
                done = ray.get(self.handle.poll_groups.remote(self.POLL_S), timeout=600)
            except Exception as e:  # noqa: BLE001 - the actor is gone or broken
                self._calls.fail_all(f"rollout actor: {type(e).__name__}: {e}")
                return
            for rid, ok, payload in done:
                self._calls.resolve(rid, ok, payload)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._calls.fail_all("rollout actor closed")
