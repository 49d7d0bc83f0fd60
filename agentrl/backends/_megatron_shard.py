"""Split a full Megatron state dict into TP/PP/EP shards and merge them back. Pure torch.

Kept beside `_megatron_convert` (names and packing) so both can be tested on CPU without
Megatron or GPUs: `merge(all shards) == full` for every (TP, PP, EP) layout is the property
that matters, and a wrong split shows up there rather than as a model that trains badly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ._megatron_convert import Layout, State

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.(.*)$")
_EXPERT = re.compile(r"^(mlp\.experts\.local_experts\.)(\d+)\.(.*)$")
_ROW_PARALLEL = ("linear_proj.weight", "linear_fc2.weight")


@dataclass(frozen=True)
class Parallel:
    """Model-parallel sizes and this rank's coordinates in them."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    tp_rank: int = 0
    pp_rank: int = 0
    ep_rank: int = 0

    def check(self, lay: Layout) -> None:
        """Fail early, with the reason, on layouts the split cannot express."""
        if lay.kv_heads % self.tp:
            raise ValueError(f"tensor parallel {self.tp} must divide kv heads {lay.kv_heads}")
        if lay.num_layers % self.pp:
            raise ValueError(f"pipeline parallel {self.pp} must divide layers {lay.num_layers}")
        if self.ep > 1 and (not lay.experts or lay.experts % self.ep):
            raise ValueError(f"expert parallel {self.ep} must divide experts {lay.experts}")
        if lay.padded_vocab % self.tp:
            raise ValueError(f"tensor parallel {self.tp} must divide vocab {lay.padded_vocab}")


def _split(t: torch.Tensor, key: str, tp: int, rank: int) -> torch.Tensor:
    """This TP rank's slice of a tensor named `key` (a layer-local or top-level name)."""
    if tp == 1 or t.dim() == 0:
        return t
    if key.endswith(_ROW_PARALLEL):
        return t.chunk(tp, dim=1)[rank]
    if key.endswith("linear_fc1.weight"):  # [gate; up]: each half split, then re-fused
        gate, up = t.chunk(2)
        return torch.cat([gate.chunk(tp)[rank], up.chunk(tp)[rank]])
    if key.endswith(("linear_qkv.weight", "linear_qkv.bias", "word_embeddings.weight")):
        return t.chunk(tp)[rank]  # qkv: whole query groups per rank (packing is per group)
    if key == "output_layer.weight":
        return t.chunk(tp)[rank]
    return t  # norms, router, shared-expert gate: replicated


def _join(parts: list[torch.Tensor], key: str) -> torch.Tensor:
    if len(parts) == 1 or parts[0].dim() == 0:
        return parts[0]
    if key.endswith(_ROW_PARALLEL):
        return torch.cat(parts, dim=1)
    if key.endswith("linear_fc1.weight"):
        halves = [p.chunk(2) for p in parts]
        return torch.cat([h[0] for h in halves] + [h[1] for h in halves])
    if key.endswith(("linear_qkv.weight", "linear_qkv.bias", "word_embeddings.weight")):
        return torch.cat(parts)
    if key == "output_layer.weight":
        return torch.cat(parts)
    return parts[0]


def shard(full: State, lay: Layout, par: Parallel) -> State:
    """The state dict of rank `par` (local layer and expert numbering)."""
    par.check(lay)
    per_stage = lay.num_layers // par.pp
    first, last = par.pp_rank == 0, par.pp_rank == par.pp - 1
    per_ep = lay.experts // par.ep if lay.experts else 0
    out: State = {}
    for key, t in full.items():
        m = _LAYER.match(key)
        if m is None:
            if key.startswith("embedding.") and not first:
                continue
            if key.startswith(("decoder.final_layernorm", "output_layer")) and not last:
                continue
            out[key] = _split(t, key, par.tp, par.tp_rank)
            continue
        layer, rest = int(m.group(1)), m.group(2)
        if layer // per_stage != par.pp_rank:
            continue
        e = _EXPERT.match(rest)
        if e is not None:
            expert = int(e.group(2))
            if expert // per_ep != par.ep_rank:
                continue
            rest = f"{e.group(1)}{expert % per_ep}.{e.group(3)}"
        out[f"decoder.layers.{layer % per_stage}.{rest}"] = _split(t, rest, par.tp, par.tp_rank)
    if lay.tied and par.pp > 1 and last:  # the last stage computes logits with its own copy
        emb = full["embedding.word_embeddings.weight"]
        out["output_layer.weight"] = _split(emb, "output_layer.weight", par.tp, par.tp_rank)
    return out


def merge(
    shards: dict[tuple[int, int, int], State], lay: Layout, tp: int, pp: int, ep: int
) -> State:
    """Full state dict from every rank's shard, keyed by (tp_rank, pp_rank, ep_rank)."""
    per_stage = lay.num_layers // pp
    per_ep = lay.experts // ep if lay.experts else 0
    pieces: dict[str, list[tuple[int, torch.Tensor]]] = {}
    for (tp_rank, pp_rank, ep_rank), state in sorted(shards.items()):
        for key, t in state.items():
            name = _global_name(key, pp_rank * per_stage, ep_rank * per_ep)
            if name is None or (ep_rank and "local_experts" not in name):
                continue  # expert-parallel replicas of non-expert weights: keep ep rank 0's
            pieces.setdefault(name, []).append((tp_rank, t))
    out: State = {}
    for name, parts in pieces.items():
        ordered = [t for _, t in sorted(parts, key=lambda p: p[0])]
        out[name] = _join(ordered, name)
    if lay.tied:
        out.pop("output_layer.weight", None)
    return out


def _global_name(key: str, layer_offset: int, expert_offset: int) -> str | None:
    m = _LAYER.match(key)
    if m is None:
        return key
    rest = m.group(2)
    e = _EXPERT.match(rest)
    if e is not None:
        rest = f"{e.group(1)}{int(e.group(2)) + expert_offset}.{e.group(3)}"
    return f"decoder.layers.{int(m.group(1)) + layer_offset}.{rest}"
