"""Attention over padding-free packed sequences, for the trainer's forward passes.

Why: a padded micro-batch of multi-turn episodes spends a large share of its FLOPs and memory
on pad tokens. Packing concatenates the sequences into one row `[1, N]` with per-sequence
position ids; attention must then stay inside each sequence. This module registers a
transformers attention implementation, `agentrl_packed`, that reads the segment boundaries
from the forward's keyword arguments (`packed_kwargs`: transformers' own `cu_seq_lens_q/k`,
`max_length_q/k`, which every decoder layer passes through to attention, also when
gradient checkpointing recomputes a layer in backward):

- on CUDA in bf16/fp16, torch's varlen flash attention (`torch.nn.attention.varlen`) runs
  every segment in one kernel;
- elsewhere (CPU, float32, older torch), each segment runs SDPA with `is_causal=True`.

With Ulysses sequence parallelism (`agentrl.backends.sequence_parallel`) each rank holds a
slice of the packed row; an all-to-all trades the sequence slice for a slice of the heads
before attention and back after it, so every rank attends over whole sequences.

Called without those arguments the implementation is plain SDPA, so a model switched to it
still serves ordinary padded forwards (the Critic, the SFT bootstrap).

Only full causal attention is supported: models with sliding-window layers or attention
logit soft-capping (Gemma-2) are refused by `check_packable` with the reason.

`enable_packed_attention(traced=True)` registers `agentrl_packed_traced` instead: the same
attention through one traceable custom op (`packed_attention_op`), so `trainer.compile`
keeps each decoder layer (or the whole decoder) in one graph; opt-in until measured
(`benchmarks/gpu_update_mfu.py`). Ulysses still takes the eager branch there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, cast

import torch
import torch.nn.functional as F

NAME = "agentrl_packed"
TRACED_NAME = "agentrl_packed_traced"  # the same attention as one traceable custom op
SP_ATTR = "_agentrl_sp_group"  # set on every submodule when Ulysses is on
# `packed_attention_op.packed_causal`, set when the traced implementation is registered (the
# op module imports this one, and registers custom ops on import).
_TRACED: dict[str, Any] = {}
# `_packed` behind `torch.compiler.disable`, made when packed attention is first switched on:
# the decorator imports torch._dynamo (about 1.1 s of the start-up of every agentrl process
# that builds no model, on a 2-core machine) and packing is off by default.
_DISABLED: dict[str, Any] = {}


def packed_kwargs(
    lengths: list[int], device: torch.device, bucket: bool = False, non_blocking: bool = False
) -> dict[str, Any]:
    """Forward keyword arguments telling `agentrl_packed` where each sequence starts.
    `bucket`: the longest length rounded up to a power of two (at least 16): the flash
    kernel reads it only to size its grid (see `packed_attention_op`), and a compiled graph
    then sees a handful of values, not one per batch. `non_blocking`: the bounds travel to
    the device from pinned memory without waiting for it."""
    cu = torch.tensor([0, *lengths], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    if non_blocking and torch.device(device).type == "cuda":
        cu = cu.pin_memory()
    cu = cu.to(device, non_blocking=non_blocking)
    longest = max(lengths)
    if bucket:
        longest = max(16, 1 << (longest - 1).bit_length())
    return {
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def check_packable(model: Any) -> str | None:
    """Why `model` cannot use packed attention, or None if it can."""
    cfg: Any = getattr(model, "config", None)
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    if text is None:
        return "model has no config"
    if any(t != "full_attention" for t in getattr(text, "layer_types", None) or []):
        return f"{text.model_type} has sliding-window layers"
    if getattr(text, "attn_logit_softcapping", None):
        return f"{text.model_type} soft-caps attention logits"
    if getattr(text, "use_sliding_window", False):
        return f"{text.model_type} uses sliding-window attention"
    return None


def enable_packed_attention(model: Any, sp_group: Any = None, traced: bool = False) -> None:
    """Switch `model`'s attention to `agentrl_packed` (registered on first use); with a
    Ulysses group, attention exchanges heads over `sp_group`. `traced`: the custom-op
    implementation `agentrl_packed_traced` instead (see the module docstring)."""
    reason = check_packable(model)
    if reason:
        raise ValueError(f"trainer.packing: {reason}; set trainer.packing=false for this model")
    from transformers import AttentionInterface

    if "packed" not in _DISABLED:
        _DISABLED["packed"] = torch.compiler.disable(_packed)
    AttentionInterface.register(NAME, packed_attention_forward)
    if traced:
        from .packed_attention_op import packed_causal  # registers agentrl::packed_causal_attention

        _TRACED["attend"] = packed_causal
        AttentionInterface.register(TRACED_NAME, packed_attention_traced_forward)
    model.set_attn_implementation(TRACED_NAME if traced else NAME)
    for module in model.modules():
        setattr(module, SP_ATTR, sp_group)


def packed_attention_forward(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: q/k/v `[B, heads, S, D]` in, `[B, S, heads, D]` out."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError("packed attention expects one packed row (batch size 1)")
    group = getattr(module, SP_ATTR, None)
    packed = _DISABLED["packed"]  # `_packed`, kept out of compiled graphs
    return packed(query, key, value, cu, int(kwargs["max_length_q"]), scaling, group), None


def packed_attention_traced_forward(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """`packed_attention_forward` with the packed branch as the traceable custom op
    `agentrl::packed_causal_attention` (Ulysses keeps the eager branch)."""
    cu = kwargs.get("cu_seq_lens_q")
    group = getattr(module, SP_ATTR, None)
    if cu is None or group is not None:
        return packed_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError("packed attention expects one packed row (batch size 1)")
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # [n, heads, D]
    max_len = kwargs["max_length_q"]
    return _TRACED["attend"](q, k, v, cu, max_len, scaling)[None], None


def _packed(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu: torch.Tensor,
    max_len: int,
    scaling: float | None,
    group: Any,
) -> torch.Tensor:
    """The packed branch, kept out of `trainer.compile`'s graphs on purpose (called through
    `torch.compiler.disable`, `_DISABLED`): its segment
    bounds are data (a graph would break on them anyway, or recompile per longest length);
    each compiled layer is then two graphs, before and after attention, with no recompiles."""
    q, k, v = query[0], key[0], value[0]  # [heads, n, D]
    seg = Segments(cu, max_len)
    if group is not None:
        from agentrl.backends.sequence_parallel import gather_sequence, scatter_sequence

        heads = q.shape[0]
        q, k, v = (gather_sequence(t, group, heads) for t in (q, k, v))
        out = attend_segments(q, k, v, seg, scaling)  # [heads/sp, N, D]
        out = scatter_sequence(out, group)  # [heads, n, D]
    else:
        out = attend_segments(q, k, v, seg, scaling)
    return out.transpose(0, 1)[None].contiguous()


@dataclass(frozen=True)
class Segments:
    """Boundaries of the packed sequences in the whole (unsplit) packed row."""

    cu_seqlens: torch.Tensor  # [S + 1] int32 on the model's device
    max_len: int

    def bounds(self) -> list[tuple[int, int]]:
        cu = self.cu_seqlens.tolist()
        return list(zip(cu[:-1], cu[1:], strict=True))


def attend_segments(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seg: Segments, scaling: float | None
) -> torch.Tensor:
    """Causal attention within each segment; `[heads, N, D]` in and out (GQA allowed)."""
    if use_varlen(q):
        from torch.nn.attention.varlen import varlen_attn

        cu = seg.cu_seqlens
        extra: dict[str, Any] = {}  # keywords this torch's varlen_attn takes
        if k.shape[0] != q.shape[0]:
            if _varlen_takes("enable_gqa"):
                extra["enable_gqa"] = True
            else:  # torch < 2.12: repeat kv heads up to the query heads
                k, v = (t.repeat_interleave(q.shape[0] // t.shape[0], dim=0) for t in (k, v))
        if _varlen_takes("window_size"):
            extra["window_size"] = (-1, 0)
        else:
            extra["is_causal"] = True
        out = varlen_attn(
            q.transpose(0, 1),
            k.transpose(0, 1),
            v.transpose(0, 1),
            cu,
            cu,
            seg.max_len,
            seg.max_len,
            scale=scaling,
            **extra,
        )
        # A tensor: without `return_aux` varlen_attn returns no aux tuple.
        return cast(torch.Tensor, out).transpose(0, 1)
    gqa = k.shape[0] != q.shape[0]
    parts = [
        F.scaled_dot_product_attention(
            q[None, :, a:b],
            k[None, :, a:b],
            v[None, :, a:b],
            is_causal=True,
            scale=scaling,
            enable_gqa=gqa,
        )[0]
        for a, b in seg.bounds()
    ]
    return torch.cat(parts, dim=1)


@cache
def _varlen_takes(name: str) -> bool:
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    return name in inspect.signature(varlen_attn).parameters


def use_varlen(q: torch.Tensor) -> bool:
    on_gpu = q.device.type == "cuda" and q.dtype in (torch.bfloat16, torch.float16)
    return on_gpu and _varlen_available()


@cache
def _varlen_available() -> bool:
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True
