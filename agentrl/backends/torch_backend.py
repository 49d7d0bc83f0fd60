"""Single-process backend: CPU or one GPU, no sharding."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from .base import TrainingBackend, named_tensors, resolve_device


class TorchBackend(TrainingBackend):
    def __init__(
        self, device: str = "auto", offload_params: bool = False, offload_optimizer: bool = False
    ) -> None:
        self._device = resolve_device(device)
        self.offload_params, self.offload_optimizer = offload_params, offload_optimizer

    @property
    def device(self) -> torch.device:
        return self._device

    def prepare(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.to(self._device)

    def full_state_dict(self, model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
        return named_tensors(model)
