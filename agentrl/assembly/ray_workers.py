"""The processes behind `trainer.placement=ray`: plain classes, made Ray actors at placement.

`LearnerWorker` holds the trained roles (actor, plus reference and critic colocated with it);
`RolloutWorker` holds the engine and the env pool. Both are built from the same config with the
same builders as the local placement, so a role behaves identically wherever it runs. Tensors
cross process boundaries on CPU through the Ray object store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentrl.config import TrainConfig
from agentrl.trainer.batch import TrainBatch
from agentrl.types import TrajectoryGroup


def _threads(n: int) -> None:
    """One process per role: keep torch to the CPUs Ray granted, not the whole machine."""
    torch.set_num_threads(max(1, n))


class LearnerWorker:
    def __init__(self, cfg: TrainConfig, num_cpus: int = 1) -> None:
        from agentrl.backends import build_backend
        from agentrl.models.load import load_model

        from .build import build_learner, seed_everything

        _threads(num_cpus)
        seed_everything(cfg.trainer.seed)
        self.backend = build_backend(cfg.trainer.backend, cfg.trainer.device, cfg.trainer)
        self.actor, self.reference, self.critic = build_learner(
            cfg, load_model(cfg.model), self.backend
        )

    def roles(self) -> tuple[bool, bool]:
        """(has reference, has critic): which proxies the driver builds."""
        return self.reference is not None, self.critic is not None

    def log_probs(self, batch: TrainBatch) -> torch.Tensor:
        return self.actor.compute_log_probs(batch)

    def sum_pi_squared(self, batch: TrainBatch) -> torch.Tensor:
        return self.actor.compute_sum_pi_squared(batch)

    def update(
        self, batch: TrainBatch, generator_state: torch.Tensor, kl_coef: float | None = None
    ) -> tuple[dict[str, float], torch.Tensor]:
        """The shuffling generator travels both ways, so the driver's copy stays the one that
        is checkpointed."""
        generator = torch.Generator()
        generator.set_state(generator_state)
        metrics = self.actor.update(batch, generator, kl_coef)
        return metrics, generator.get_state()

    def named_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu() for k, v in self.actor.named_weights()}

    def sft(self, demos: list[Any], cfg: Any, pad_id: int, seed: int) -> list[float]:
        return self.actor.sft(demos, cfg, pad_id, seed)

    def state(self) -> dict[str, Any]:
        return self.actor.state()

    def load_state(self, state: dict[str, Any]) -> None:
        self.actor.load_state(state)

    def ref_log_probs(self, batch: TrainBatch) -> torch.Tensor:
        assert self.reference is not None
        return self.reference.compute_log_probs(batch)

    def ref_load_weights(self, weights: dict[str, torch.Tensor]) -> None:
        assert self.reference is not None
        self.reference.load_weights(weights)

    def critic_call(self, method: str, *args: Any) -> Any:
        """compute_values / update / state / load_state on the critic."""
        return getattr(self.critic, method)(*args)

    def close(self) -> None:
        self.backend.close()


class RolloutWorker:
    def __init__(self, cfg: TrainConfig, num_cpus: int = 1) -> None:
        from agentrl.backends import resolve_device
        from agentrl.models.load import load_model, load_tokenizer

        from .build import build_rollout, seed_everything

        _threads(num_cpus)
        seed_everything(cfg.trainer.seed)
        tokenizer = load_tokenizer(cfg.model)
        policy = load_model(cfg.model, trainable=False)
        device = resolve_device(cfg.trainer.device)
        self.rollout, self.success_at = build_rollout(cfg, policy, tokenizer, device)

    def threshold(self) -> float:
        return self.success_at

    def collect(
        self, items: Sequence[Any], n: int
    ) -> tuple[list[TrajectoryGroup], dict[str, float]]:
        groups = self.rollout.collect(items, n)
        return groups, dict(self.rollout.stats)

    def collect_with_greedy(
        self, items: Sequence[Any], n: int
    ) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup], dict[str, float]]:
        groups, greedy = self.rollout.collect_with_greedy(items, n)
        return groups, greedy, dict(self.rollout.stats)

    def evaluate(self, seeds: Sequence[int], success_at: float) -> dict[str, float]:
        return self.rollout.evaluate(seeds, success_at)

    def sync_weights(self, weights: dict[str, torch.Tensor]) -> float:
        return self.rollout.sync_weights(weights.items())

    # -------- the group producer of a pipelined trainer (`trainer.async`): every call returns
    # at once (or within `wait_s`), so this single-threaded actor keeps serving syncs while
    # groups run on the rollout's background loop.
    def producer_info(self) -> tuple[bool, int]:
        """(reports per-token weight versions, the engine's update count)."""
        producer = self.rollout.producer
        assert producer is not None
        return producer.reports_versions, producer.weight_version

    def start_producer(self) -> None:
        import collections

        assert self.rollout.producer is not None
        self.rollout.producer.start()
        self._groups: dict[int, Any] = {}
        self._finished: collections.deque[int] = collections.deque()

    def submit_group(
        self, rid: int, task: Any, position: int, n: int, key: str, resume: list[Any]
    ) -> None:
        assert self.rollout.producer is not None
        fut = self.rollout.producer.submit_group(task, position, n, key, resume)
        self._groups[rid] = fut
        fut.add_done_callback(lambda _f: self._finished.append(rid))

    def in_flight(self) -> dict[str, list[Any]]:
        assert self.rollout.producer is not None
        return self.rollout.producer.in_flight()

    def cancel_group(self, rid: int) -> None:
        if (fut := self._groups.pop(rid, None)) is not None:
            fut.cancel()

    def poll_groups(self, wait_s: float) -> list[tuple[int, bool, Any]]:
        """Groups finished since the last poll, as (id, ok, group or error text); waits up
        to `wait_s` for the first."""
        import time

        deadline = time.monotonic() + wait_s
        while not self._finished and time.monotonic() < deadline:
            time.sleep(0.002)
        out: list[tuple[int, bool, Any]] = []
        while self._finished:
            fut = self._groups.pop(rid := self._finished.popleft(), None)
            if fut is None or fut.cancelled():
                continue
            e = fut.exception()
            out.append((rid, e is None, fut.result() if e is None else f"{type(e).__name__}: {e}"))
        return out

    def offload(self) -> None:
        self.rollout.offload()

    def close(self) -> None:
        self.rollout.close()
