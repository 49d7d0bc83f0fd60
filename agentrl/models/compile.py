"""`torch.compile` of a model's decoder layers (`trainer.compile`), torchtitan-style.

Why per layer: every decoder layer runs the same code, so one compiled graph (dynamic shapes:
packed and padded micro-batches vary in length) serves all of them, and compile time does
not grow with depth. Inductor fuses the layer's elementwise work (RMSNorm in float32, RoPE,
SiLU·mul, residual adds), which at small hidden sizes costs as much as the matmuls when run
as separate kernels. The embedding, lm-head and log-prob reduction stay eager.

`compile_model(model, "decoder")` (opt-in, `UpdateLevers.compile_scope`) compiles the whole
decoder stack (embeddings, layers, final norm) as one module instead: one graph and one
backward for the model instead of one per layer, so fewer Python calls and guard checks per
step, at a longer first compile. It is one graph only when attention traces
(`packed_attention`'s traced implementation); otherwise it breaks around attention.
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


def decoder_module(model: torch.nn.Module) -> torch.nn.Module | None:
    """The decoder stack of a causal LM (transformers' `get_decoder()`, through peft/FSDP
    wrappers), or None."""
    roots = [model, getattr(model, "base_model", None), getattr(model, "model", None)]
    for root in (r for r in roots if r is not None):
        get = getattr(root, "get_decoder", None)
        if get is None:
            continue
        try:
            decoder = get()
        except (AttributeError, NotImplementedError):
            continue
        if isinstance(decoder, torch.nn.Module) and decoder is not root:
            return decoder
    return None


def compile_model(model: torch.nn.Module, scope: str = "layers") -> int:
    """`trainer.compile`: each decoder layer (`layers`), or the decoder stack as one module
    (`decoder`); returns how many modules were compiled."""
    if scope == "layers":
        return compile_decoder_layers(model)
    if scope != "decoder":
        raise ValueError(f"compile scope {scope!r} is not one of 'layers', 'decoder'")
    decoder = decoder_module(model)
    if decoder is None:
        raise ValueError(f"trainer.compile: no decoder stack found in {type(model).__name__}")
    decoder.compile(dynamic=True)
    return 1
