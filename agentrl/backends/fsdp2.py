"""FSDP2 backend: parameters sharded with `torch.distributed.fsdp.fully_shard`.

Launch with `torchrun --nproc-per-node N -m agentrl.cli train ... trainer.backend=fsdp2`
(gloo on CPU, NCCL on GPU). Each decoder layer is its own FSDP unit, then the root, so
all-gathers overlap with compute layer by layer. Each rank trains on its slice of the batch;
gradient reduction averages over ranks, which `grad_scale` undoes so the update equals the
single-process update on the whole batch. Every rank must run the same number of forward and
backward passes (each one all-gathers parameters); the Actor pads short shards with zero-weight
micro-batches to keep them in step.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from agentrl.models.compile import decoder_layers

from .base import TrainingBackend, resolve_device, unwrap_state_name


class FSDP2Backend(TrainingBackend):
    plain_modules = False  # parameters are sharded DTensors, unsharded by hooks

    def __init__(
        self,
        device: str = "auto",
        timeout_s: float = 600.0,
        sequence_parallel: int = 1,
        offload_policy: bool = False,
        offload_params: bool = False,
        offload_optimizer: bool = False,
    ) -> None:
        """`sequence_parallel` > 1: Ulysses groups of that many ranks share rows (see
        `sequence_parallel`); `offload_policy`: FSDP2's CPUOffloadPolicy (parameters,
        gradients and optimizer state in CPU memory, layers copied in one at a time, the
        optimizer step on CPU); `offload_params/optimizer`: CPU between phases (base class)."""
        self._device = resolve_device(device)
        self.offload_policy = offload_policy
        self.offload_params, self.offload_optimizer = offload_params, offload_optimizer
        if not dist.is_initialized():
            if "RANK" not in os.environ:
                raise RuntimeError(
                    "trainer.backend=fsdp2 needs a process group: launch with "
                    "`torchrun --nproc-per-node N -m agentrl.cli train ...`"
                )
            from datetime import timedelta

            kind = "nccl" if self._device.type == "cuda" else "gloo"
            dist.init_process_group(kind, timeout=timedelta(seconds=timeout_s))
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        if self._device.type == "cuda":
            local = int(os.environ.get("LOCAL_RANK", self.rank))
            torch.cuda.set_device(local)
            self._device = torch.device("cuda", local)
        self.sp = sequence_parallel
        self._sp_group = None
        if sequence_parallel > 1:
            from .sequence_parallel import new_sp_group

            self._sp_group = new_sp_group(sequence_parallel)

    def sequence_parallel_group(self) -> Any:
        if self._sp_group is None:
            raise ValueError("this FSDP2Backend was built with sequence_parallel=1")
        return self._sp_group

    @property
    def device(self) -> torch.device:
        return self._device

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import fully_shard

        kwargs: dict[str, Any] = {}
        if self.offload_policy:
            from torch.distributed.fsdp import CPUOffloadPolicy

            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=self._device.type == "cuda")
        else:
            model.to(self._device)
        for layer in decoder_layers(model):
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        return model

    def global_sum(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self._device)
        dist.all_reduce(t)
        return float(t.item()) / self.sp  # a Ulysses group's ranks hold the same value

    def full_state_dict(self, model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        """Streams one all-gathered tensor at a time, so peak memory is one full parameter
        beyond the shards; every rank gets every tensor (each rank feeds its own engine)."""
        from torch.distributed.tensor import DTensor

        for name, tensor in model.state_dict().items():
            full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor
            yield unwrap_state_name(name), full.detach()

    def load_full_state_dict(self, model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        values: dict[str, Any] = state  # torch's parameter type is an invariant dict
        set_model_state_dict(model, values, options=StateDictOptions(full_state_dict=True))

    def optimizer_state_dict(self, model: torch.nn.Module, optimizer: Any) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_optimizer_state_dict(model, optimizer, options=opts)

    def load_optimizer_state_dict(
        self, model: torch.nn.Module, optimizer: Any, state: dict[str, Any]
    ) -> None:
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True)
        set_optimizer_state_dict(model, optimizer, state, options=opts)

    def gather_objects(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
