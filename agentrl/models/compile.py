"""`torch.compile` of a model's decoder layers (`trainer.compile`), torchtitan-style.

Why per layer: every decoder layer runs the same code, so one compiled graph (dynamic shapes:
packed and padded micro-batches vary in length) serves all of them, and compile time does
not grow with depth. Inductor fuses the layer's elementwise work (RMSNorm in float32, RoPE,
SiLU·mul, residual adds), which at small hidden sizes costs as much as the matmuls when run
as separate kernels. The embedding, lm-head and log-prob reduction stay eager.
"""

from __future__ import annotations

from typing import Any

import torch

LAYER_PATHS = ("model.layers", "model.language_model.layers", "transformer.h", "layers")


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a causal LM (peft/FSDP wrappers included), or []."""
    roots = [model, getattr(model, "base_model", None), getattr(model, "model", None)]
    for root in (r for r in roots if r is not None):
        for path in LAYER_PATHS:
            node: Any = root
            for part in path.split("."):
                node = getattr(node, part, None)
                if node is None:
                    break
            if isinstance(node, torch.nn.ModuleList):
                return list(node)
    return []


def compile_decoder_layers(model: torch.nn.Module) -> int:
    """Compile every decoder layer in place (names and state dict keys unchanged)."""
    layers = decoder_layers(model)
    if not layers:
        raise ValueError(f"trainer.compile: no decoder layers found in {type(model).__name__}")
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)
