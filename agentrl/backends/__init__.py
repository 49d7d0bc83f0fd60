"""Training backends behind one interface; chosen by `trainer.backend`."""

from __future__ import annotations

from collections.abc import Callable

from .base import TrainingBackend, resolve_device
from .torch_backend import TorchBackend


def _fsdp2(device: str) -> TrainingBackend:
    from .fsdp2 import FSDP2Backend

    return FSDP2Backend(device)


def _megatron(device: str) -> TrainingBackend:
    from .megatron import MegatronBackend  # type: ignore[import-not-found]

    return MegatronBackend(device)


BACKENDS: dict[str, Callable[[str], TrainingBackend]] = {
    "torch": TorchBackend,
    "fsdp2": _fsdp2,
    "megatron": _megatron,
}


def build_backend(kind: str, device: str = "auto") -> TrainingBackend:
    if kind not in BACKENDS:
        raise ValueError(f"unknown trainer.backend {kind!r}; known: {sorted(BACKENDS)}")
    return BACKENDS[kind](device)


__all__ = ["BACKENDS", "TorchBackend", "TrainingBackend", "build_backend", "resolve_device"]
