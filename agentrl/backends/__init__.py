"""Training backends behind one interface; chosen by `trainer.backend`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import TrainingBackend, resolve_device
from .torch_backend import TorchBackend


def _torch(device: str, cfg: Any) -> TrainingBackend:
    if cfg is not None and (cfg.ulysses_sp > 1 or cfg.fsdp_offload_policy):
        raise ValueError(
            "trainer.ulysses_sp and trainer.fsdp_offload_policy need trainer.backend=fsdp2"
        )
    return TorchBackend(device, **_offload(cfg))


def _fsdp2(device: str, cfg: Any) -> TrainingBackend:
    from .fsdp2 import FSDP2Backend

    if cfg is None:
        return FSDP2Backend(device)
    return FSDP2Backend(
        device,
        sequence_parallel=cfg.ulysses_sp,
        offload_policy=cfg.fsdp_offload_policy,
        **_offload(cfg),
    )


def _megatron(device: str, cfg: Any) -> TrainingBackend:
    from .megatron import MegatronBackend  # type: ignore[import-not-found]

    if cfg is not None and (cfg.packing or cfg.ulysses_sp > 1 or any(_offload(cfg).values())):
        raise ValueError(
            "trainer.backend=megatron has its own parallelism: packing, ulysses_sp and "
            "offload options apply to the torch/fsdp2 backends"
        )
    return MegatronBackend(device)


def _offload(cfg: Any) -> dict[str, bool]:
    if cfg is None:
        return {}
    return {"offload_params": cfg.param_offload, "offload_optimizer": cfg.optimizer_offload}


BACKENDS: dict[str, Callable[[str, Any], TrainingBackend]] = {
    "torch": _torch,
    "fsdp2": _fsdp2,
    "megatron": _megatron,
}


def build_backend(kind: str, device: str = "auto", cfg: Any = None) -> TrainingBackend:
    """The backend `kind` names; `cfg` (a `TrainerConfig`) carries its options."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown trainer.backend {kind!r}; known: {sorted(BACKENDS)}")
    return BACKENDS[kind](device, cfg)


__all__ = ["BACKENDS", "TorchBackend", "TrainingBackend", "build_backend", "resolve_device"]
