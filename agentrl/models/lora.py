"""Merged LoRA weights for the rollout engine, computed out of place.

peft's `merge_adapter()` / `unmerge_adapter()` add the adapter delta into the base weight and
subtract it again. That round trip is not exact in floating point, so doing it at every weight
sync makes the frozen base weights drift a little each step (in bf16 by ~2^-8 relative per
sync). Here the delta is added to a copy: the trained model is never touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def _deltas(model: Any) -> dict[str, torch.Tensor]:
    """`<module>.base_layer.weight` → summed delta of the module's active, unmerged adapters."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    out: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if not isinstance(module, BaseTunerLayer) or module.merged or module.disable_adapters:
            continue
        if not hasattr(module, "get_delta_weight"):
            continue
        active = [a for a in module.active_adapters if a in getattr(module, "lora_A", {})]
        active += [
            a for a in module.active_adapters if a in getattr(module, "lora_embedding_A", {})
        ]
        if active:
            out[f"{name}.base_layer.weight"] = sum(module.get_delta_weight(a) for a in active)
    return out


def hf_name(peft_name: str) -> str:
    """`base_model.model.model.layers.0.q_proj.base_layer.weight` → `model.layers.0.q_proj.weight`."""
    name = peft_name.removeprefix("base_model.model.")
    return name.replace(".base_layer.", ".")


@torch.no_grad()
def merged_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full weight with adapters folded in) for every tensor of a peft model."""
    deltas = _deltas(model)
    for name, tensor in model.state_dict().items():
        if "lora_" in name or "modules_to_save" in name:
            continue
        delta = deltas.get(name)
        merged = tensor + delta.to(tensor.dtype) if delta is not None else tensor.clone()
        yield hf_name(name), merged.detach()
