"""The rollout in a child process of its own (`trainer.async.producer: process`).

Why: in one process the engine's decode loop, the episodes' event loop and a host-bound
update take turns on one interpreter lock, so a pipelined trainer cannot overlap them
(docs/async.md). Here the child holds the engine and the envs; the trainer's process keeps
the learner. On one GPU both processes share the device.

- **Calls**: `ProcessRollout` has the local `Rollout`'s methods (`RolloutRole`) and is a
  `GroupProducer`. Each call is a message on a command queue with a request id; a reader
  thread resolves the matching future from the reply queue. Finished episodes stream back
  for progress hooks. Every wait is bounded by `trainer.async.producer_timeout_s`, and a
  child that dies fails every open call with its exit code.
- **Weights**: one staging copy of the engine's state dict is allocated by the trainer's
  process (CUDA memory shared by IPC handle, or shared CPU memory) and handed to the child
  at spawn. `sync_weights` waits until the child has applied the previous copy, writes the
  new weights into the staging tensors, synchronises the device and posts ("weights", v);
  the child applies them with `Engine.update_weights` (between two decode steps) and acks.
  The trainer never waits for a decode step, and never overwrites weights being read.
- **Order**: the child reads commands on one thread and applies weights on it before the
  next command, so a collect posted after a sync always samples the new weights.
- **Versions**: `weight_version` counts the syncs posted; the child's engine counts the
  ones applied, which is what stamps each token, so a token sampled before the swap landed
  keeps the old version.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.multiprocessing as mp

from agentrl.chat import ChatFormat
from agentrl.engines.base import EngineError
from agentrl.rollout.resume import EpisodeState
from agentrl.trainer.components import EpisodeHook
from agentrl.types import TrajectoryGroup

from ._futures import FutureTable
from ._process_child import serve

# (config, device, staging tensors) -> the child's local `Rollout`, its engine's weights
# loaded from the staging tensors; a module-level function (spawn pickles it by name).
Builder = Callable[[Any, torch.device, dict[str, torch.Tensor]], Any]
_POLL_S = 0.5


def staging_copy(state: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """Tensors the child can read, filled with `state`: device memory (CUDA IPC) or shared
    CPU memory; tied weights get one tensor per name, as `update_weights` expects."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        buf = torch.empty(t.shape, dtype=t.dtype, device=device)
        buf.copy_(t.detach())
        out[name] = buf if device.type == "cuda" else buf.share_memory_()
    return out


class ProcessRollout:
    """Parent-side handle of the rollout child: `RolloutRole` and `GroupProducer`."""

    def __init__(
        self,
        build: Builder,
        cfg: Any,
        device: torch.device,
        state: dict[str, torch.Tensor],
        chat: ChatFormat,
        timeout_s: float,
    ) -> None:
        self.chat, self.timeout_s = chat, timeout_s
        if device.type == "cuda" and device.index is None:  # the child must name the same one
            device = torch.device("cuda", torch.cuda.current_device())
        self.staging = staging_copy(state, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        ctx = mp.get_context("spawn")
        self._cmd: Any = ctx.Queue()
        self._out: Any = ctx.Queue()
        self._ids = itertools.count()
        self._calls = FutureTable("rollout process")
        self._hooks: dict[int, EpisodeHook] = {}
        self._stats: dict[str, float] = {}
        self._sent = 0  # weight syncs posted
        self._applied: concurrent.futures.Future[Any] | None = None  # the last sync's ack
        self._closed = False
        self.proc = ctx.Process(
            target=serve,
            args=(build, cfg, device, self.staging, self._cmd, self._out),
            name="agentrl-rollout",
            daemon=True,
        )
        ready = self._future(-1)
        self.proc.start()
        self._reader = threading.Thread(
            target=self._read, name="agentrl-rollout-reader", daemon=True
        )
        self._reader.start()
        info = self._wait(ready, "start-up (model load, engine build)")
        self.features: frozenset[str] = info["features"]
        self._sent = info["weight_version"]

    # ---------------------------------------------------------------- plumbing
    def _future(self, rid: int, hook: EpisodeHook = None) -> concurrent.futures.Future[Any]:
        if hook is not None:
            self._hooks[rid] = hook
        return self._calls.add(rid)

    def _post(
        self, op: str, *args: Any, hook: EpisodeHook = None
    ) -> tuple[int, concurrent.futures.Future[Any]]:
        if self._closed:
            raise EngineError("rollout process: already closed")
        rid = next(self._ids)
        fut = self._future(rid, hook)
        self._cmd.put((op, rid, hook is not None, args))
        return rid, fut

    def _wait(self, fut: concurrent.futures.Future[Any], what: str) -> Any:
        try:
            return fut.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"rollout process: {what} took longer than "
                f"trainer.async.producer_timeout_s={self.timeout_s}s"
            ) from None

    def _call(self, op: str, *args: Any, hook: EpisodeHook = None) -> Any:
        return self._wait(self._post(op, *args, hook=hook)[1], op)

    def _read(self) -> None:
        """Resolve futures from the child's replies; fail them all if the child dies."""
        while True:
            try:
                kind, rid, payload = self._out.get(timeout=_POLL_S)
            except queue.Empty:
                if self.proc.is_alive():
                    continue
                if self._closed:
                    return
                self._calls.fail_all(f"rollout process died (exit code {self.proc.exitcode})")
                return
            except (EOFError, OSError):
                self._calls.fail_all("rollout process: reply channel closed")
                return
            if kind == "episode":
                hook = self._hooks.get(rid)
                if hook is not None:
                    hook(payload)
                continue
            self._hooks.pop(rid, None)
            self._calls.resolve(rid, kind == "ok", payload)

    # ---------------------------------------------------------------- RolloutRole
    @property
    def producer(self) -> ProcessRollout:
        return self

    @property
    def stats(self) -> dict[str, float]:
        return self._stats

    def collect(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> list[TrajectoryGroup]:
        groups, self._stats = self._call("collect", list(items), n, hook=on_episode)
        return groups  # type: ignore[no-any-return]

    def collect_with_greedy(
        self, items: Sequence[Any], n: int, on_episode: EpisodeHook = None
    ) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]:
        groups, greedy, self._stats = self._call(
            "collect_with_greedy", list(items), n, hook=on_episode
        )
        return groups, greedy

    def evaluate(
        self, seeds: Sequence[Any], success_at: float, on_episode: EpisodeHook = None
    ) -> dict[str, float]:
        return self._call("evaluate", list(seeds), success_at, hook=on_episode)  # type: ignore[no-any-return]

    def sync_weights(self, named: Iterable[tuple[str, torch.Tensor]]) -> float:
        """Seconds this process spent: waiting for the previous copy's ack (normally done
        long ago), writing the staging tensors and synchronising the device. The child
        applies them between two decode steps, before any command posted later."""
        t0 = time.perf_counter()
        if self._applied is not None:
            self._wait(self._applied, "applying the previous weights")
        with torch.no_grad():
            items = list(named)
            unknown = [k for k, _ in items if k not in self.staging]
            if unknown:
                raise EngineError(f"update_weights: unknown parameter names {unknown[:5]}")
            for name, tensor in items:
                self.staging[name].copy_(tensor.detach(), non_blocking=True)
        device = next(iter(self.staging.values())).device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self._applied = self._post("weights")[1]
        self._sent += 1
        return time.perf_counter() - t0

    def offload(self) -> None:
        self._call("offload")

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self.proc.is_alive():
                fut = self._post("close")[1]
                self._closed = True
                try:
                    fut.result(timeout=min(self.timeout_s, 120.0))
                except Exception:  # noqa: BLE001 - a child that cannot close cleanly is killed
                    pass
        finally:
            self._closed = True
            self.proc.join(timeout=30)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join(timeout=30)
            self._calls.fail_all("rollout process closed")

    # ---------------------------------------------------------------- GroupProducer
    @property
    def weight_version(self) -> int:
        return self._sent

    @property
    def reports_versions(self) -> bool:
        return "weight_versions" in self.features

    def start(self) -> None:
        """The child's runner loop is already in the background."""

    def in_flight(self) -> dict[str, list[EpisodeState]]:
        """The child's groups in flight (`RolloutRunner.in_flight`), sent back pickled."""
        if not self.proc.is_alive():  # nothing would answer: say so now, not at the timeout
            raise EngineError(f"rollout process died (exit code {self.proc.exitcode})")
        return self._call("in_flight")  # type: ignore[no-any-return]

    def submit_group(
        self, task: Any, position: int, n: int, key: str, resume: Sequence[EpisodeState] = ()
    ) -> concurrent.futures.Future[TrajectoryGroup]:
        rid, fut = self._post("group", task, position, n, key, list(resume))

        def cancelled(f: concurrent.futures.Future[Any]) -> None:
            if f.cancelled() and not self._closed:
                self._cmd.put(("cancel", rid, False, ()))

        fut.add_done_callback(cancelled)
        return fut
