"""Training backends: where the policy's parameters live and how gradients are combined.

The trainer talks to one small interface. `TorchBackend` is a single process on CPU or one
GPU; `FSDP2Backend` shards parameters over a process group with `fully_shard`. Losses are
aggregated globally: `global_sum` turns per-rank token/sequence counts into batch totals, so a
sharded run computes the same loss as a single process on the same batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


class TrainingBackend(ABC):
    rank: int = 0
    world_size: int = 1
    offload_params: bool = False
    offload_optimizer: bool = False
    sp: int = 1  # Ulysses group size: ranks that hold the same rows
    # The prepared model's submodules can be called on their own and its parameters read as
    # plain tensors (no sharding hooks): what `trainer.update_path: fused` needs.
    plain_modules: bool = True

    @property
    def data_parallel_size(self) -> int:
        """Ranks that train on different rows."""
        return self.world_size // self.sp

    @property
    @abstractmethod
    def device(self) -> torch.device: ...

    @abstractmethod
    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        """Move/shard the model for training; returns the module to call."""

    def global_sum(self, value: float) -> float:
        """Sum a number over data shards (identity for one process). Ranks of one
        sequence-parallel group hold the same rows and count once."""
        return value

    def sequence_parallel_group(self) -> Any:
        """The process group this rank shares rows with under Ulysses (`trainer.ulysses_sp`)."""
        raise ValueError("trainer.ulysses_sp > 1 needs trainer.backend=fsdp2 (under torchrun)")

    @contextmanager
    def on_device(self, model: torch.nn.Module, optimizer: Any = None) -> Iterator[None]:
        """Parameters (and the optimizer state) on the compute device inside the block.

        With `offload_params`/`offload_optimizer` set (verl's param_offload /
        optimizer_offload) they wait in CPU memory between phases, so the rollout engine
        can use the GPU memory; without, this does nothing."""
        if not (self.offload_params or self.offload_optimizer):
            yield
            return
        if self.offload_params:
            model.to(self.device)
        if self.offload_optimizer and optimizer is not None:
            move_optimizer_state(optimizer, self.device)
        try:
            yield
        finally:
            self.offload(model, optimizer)
            if self.device.type == "cuda":
                torch.cuda.empty_cache()

    def offload(self, model: torch.nn.Module, optimizer: Any = None) -> None:
        """Move offloaded state to CPU now (after `prepare`, before the first phase)."""
        if self.offload_params:
            model.to("cpu")
        if self.offload_optimizer and optimizer is not None:
            move_optimizer_state(optimizer, torch.device("cpu"))

    def shard(self, n: int) -> list[int]:
        """Row indices of a batch of `n` this rank trains on, by data-parallel rank (the ranks
        of one Ulysses group get the same rows). Shares differ by at most one row: the Actor
        pads every rank to the micro-batch count of ceil(n / data_parallel_size) rows."""
        return list(range(self.rank // self.sp, n, self.data_parallel_size))

    def grad_scale(self) -> float:
        """Factor undoing the mean that gradient reduction applies across ranks."""
        return float(self.world_size)

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float | torch.Tensor:
        """Clip to the global norm and return it: inside `deferred_metrics()` as a 0-d device
        tensor, so the optimizer step is queued right behind the backward instead of after a
        host sync (on the H200 that sync left the GPU idle ~2 ms per update)."""
        from agentrl.algorithms.deferred import metric

        return metric(_whole(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))

    @abstractmethod
    def full_state_dict(self, model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        """Full (unsharded) named tensors on every rank, for weight sync and checkpoints.

        Collective under sharding: every rank must call it, since every rank's engine needs
        the weights and rank 0 writes the checkpoint."""

    def load_full_state_dict(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load full tensors (a checkpoint) into a possibly sharded model."""
        model.load_state_dict(state)

    def optimizer_state_dict(self, model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
        """Optimizer state a single process could load (unsharded under FSDP)."""
        return optimizer.state_dict()

    def load_optimizer_state_dict(
        self, model: torch.nn.Module, optimizer: Any, state: dict[str, Any]
    ) -> None:
        optimizer.load_state_dict(state)

    def gather_objects(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order (rollout groups collected per rank)."""
        return [obj]

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for all ranks."""

    def close(self) -> None:
        """Tear down the process group, if any."""


def move_optimizer_state(optimizer: Any, device: torch.device) -> None:
    """The optimizer state's tensors to `device` (Adam moments). Step counters stay put:
    non-capturable Adam wants them on the CPU."""
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and key != "step":
                state[key] = value.to(device, non_blocking=True)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def unwrap_state_name(name: str) -> str:
    """Strip wrapper prefixes (torch.compile, checkpoint wrappers) from a parameter name."""
    for prefix in ("_orig_mod.", "_checkpoint_wrapped_module."):
        name = name.replace(prefix, "")
    return name


def named_tensors(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in model.state_dict().items():
        yield unwrap_state_name(name), tensor


def _whole(norm: torch.Tensor) -> torch.Tensor:
    """FSDP2's norm of sharded gradients is a DTensor: made whole (collective)."""
    if not torch.distributed.is_available():
        return norm
    from torch.distributed.tensor import DTensor

    return norm.full_tensor() if isinstance(norm, DTensor) else norm
