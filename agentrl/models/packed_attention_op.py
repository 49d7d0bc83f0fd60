"""Packed causal attention as one `torch.library` custom op, so `torch.compile` traces it.

Why: `packed_attention`'s default branch is `torch.compiler.disable`d, which splits every
compiled decoder layer into four graphs around attention (forward and backward alike) and
runs the attention glue (transposes, GQA head repeats, torch's Python `varlen_attn` wrapper)
eagerly: at a short single-turn batch that host work, not the GPU, sets the update's pace.
An opaque custom op with a fake (shape) implementation and a registered autograd formula
lets dynamo keep a whole layer, or the whole decoder stack, in one graph.

`agentrl::packed_causal_attention(q [N, Hq, D], k [N, Hkv, D], v, cu_seqlens [S+1] int32,
max_len, scale) -> (out [N, Hq, D], lse [Hq, N] float32)`:

- on CUDA in bf16/fp16 (the same rule as the eager branch, `packed_attention.use_varlen`)
  it calls the flash kernels directly (`aten._flash_attention_forward/_backward`, the ops
  torch's own `varlen_attn` wraps) with the kv heads as they are: flash handles GQA itself,
  so the `[N, Hq, D]` copies of k and v and their backward reductions go away (should a
  build refuse it, the op repeats the kv heads instead, once decided for the process);
- elsewhere (CPU, float32) it is the eager branch's per-segment SDPA, with the softmax
  attention gradients written out for its backward (`lse` is then an unused placeholder).

`max_len` only sizes the flash grid (blocks past a segment's real length exit at once; each
row's result depends on the real segment bounds in `cu_seqlens`; at most a split-KV choice,
hence the float summation order, may follow it), so callers may round it up
(`packed_kwargs(bucket=True)`) to keep the number of distinct values, and with them any
recompiles, small; the CPU path does not read it. Outputs are always contiguous, in the fake
implementation as in the real one, so a compiled graph's layout assumptions hold.
"""

from __future__ import annotations

from typing import Any

import torch

from .packed_attention import Segments, attend_segments, use_varlen

_GQA_NATIVE = {"ok": True}  # flip to repeating kv heads if this build's flash refuses GQA


def _flash_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    groups = q.shape[1] // k.shape[1]
    if groups > 1 and not _GQA_NATIVE["ok"]:
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    return q.contiguous(), k.contiguous(), v.contiguous()


def _flash_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, max_len: int, scale: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    fq, fk, fv = _flash_inputs(q, k, v)
    try:
        out = torch.ops.aten._flash_attention_forward(
            fq, fk, fv, cu, cu, max_len, max_len, 0.0, True, False, scale=scale
        )
    except RuntimeError:
        if fk.shape[1] == fq.shape[1] or not _GQA_NATIVE["ok"]:
            raise
        _GQA_NATIVE["ok"] = False  # this build's kernel wants as many kv heads as q heads
        return _flash_forward(q, k, v, cu, max_len, scale)
    return out[0].contiguous(), out[1].contiguous()


# Measurement switch (benchmarks/gpu_update_mfu.py times both): True lets `packed_causal`
# call the flash op directly where it can; False always goes through the custom op.
DIRECT_FLASH = {"on": True}


def packed_causal(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_len: int,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal attention within each packed segment, `[N, Hq, D]` out: what the traced
    implementation calls.

    On CUDA in bf16/fp16 with native GQA this is torch's flash op itself,
    `aten._flash_attention_forward`: an aten op with a meta function and an autograd formula
    (its backward is `aten._flash_attention_backward`), so dynamo traces it like any other
    op, and the compiled graph calls it from C++ instead of through the Python custom op
    below (~100 us of host time per call in a profiled H200 update). Measured on the 0.5B
    update it is no faster (125.0 vs 124.9 ms median, BENCHMARKS.md): the host time hides
    behind the GPU there. Elsewhere (CPU, float32, a flash build that wants repeated kv
    heads) it is the custom op."""
    if DIRECT_FLASH["on"] and _GQA_NATIVE["ok"] and use_varlen(q):
        out = torch.ops.aten._flash_attention_forward(
            q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens, cu_seqlens,
            max_len, max_len, 0.0, True, False, scale=scale,
        )  # fmt: skip
        return out[0]
    return torch.ops.agentrl.packed_causal_attention(q, k, v, cu_seqlens, max_len, scale)[0]


@torch.library.custom_op("agentrl::packed_causal_attention", mutates_args=())
def packed_causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_len: int,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention within each packed segment; see the module docstring."""
    if use_varlen(q):
        return _flash_forward(q, k, v, cu_seqlens, max_len, scale)
    return _segments_forward(q, k, v, cu_seqlens, scale), _lse_placeholder(q)


def _segments_forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu: torch.Tensor, scale: Any
) -> torch.Tensor:
    """The eager branch's per-segment SDPA on `[N, H, D]` tensors."""
    seg = Segments(cu, 0)  # max_len unused off flash
    hq, hk, hv = (t.transpose(0, 1) for t in (q, k, v))
    return attend_segments(hq, hk, hv, seg, scale).transpose(0, 1).contiguous()


def _lse_placeholder(q: torch.Tensor) -> torch.Tensor:
    return q.new_zeros((q.shape[1], q.shape[0]), dtype=torch.float32)


@packed_causal_attention.register_fake
def _(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_len: int,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape), _lse_placeholder(q)


@torch.library.custom_op("agentrl::packed_causal_attention_backward", mutates_args=())
def packed_causal_attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_len: int,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of `packed_causal_attention`, each shaped and laid out as its input."""
    if not use_varlen(q):
        return _segments_backward(grad_out, q, k, v, cu_seqlens, scale)
    fq, fk, fv = _flash_inputs(q, k, v)
    rng = torch.zeros((2,), dtype=torch.uint64, device=q.device)  # dropout is 0: unread
    unused = torch.empty(0, device=q.device)
    dq, dk, dv = torch.ops.aten._flash_attention_backward(
        grad_out.contiguous(), fq, fk, fv, out, lse, cu_seqlens, cu_seqlens, max_len, max_len,
        0.0, True, rng, unused, scale=scale,
    )  # fmt: skip
    if dk.shape[1] != k.shape[1]:  # kv heads were repeated: sum each group back
        dk, dv = (t.unflatten(1, (k.shape[1], -1)).sum(2) for t in (dk, dv))
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


def _segments_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu: torch.Tensor,
    scale: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Softmax attention's gradients per segment, written out (autograd does not run inside
    an op): P = softmax(QKᵀ·s) causal, dV = PᵀdO, dS = P ∘ (dO Vᵀ − rowsum(dO Vᵀ ∘ P)),
    dQ = dS K·s, dK = dSᵀQ·s; the kv heads' gradients summed over their query groups."""
    groups = q.shape[1] // k.shape[1]
    s = scale if scale is not None else q.shape[-1] ** -0.5
    acc = torch.promote_types(q.dtype, torch.float32)  # at least float32 inside
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for a, b in Segments(cu, 0).bounds():
        qs, go = (t[a:b].transpose(0, 1).to(acc) for t in (q, grad_out))  # [Hq, n, D]
        ks, vs = (t[a:b].transpose(0, 1).to(acc).repeat_interleave(groups, 0) for t in (k, v))
        causal = torch.ones(b - a, b - a, dtype=torch.bool, device=q.device).tril()
        p = torch.softmax((qs @ ks.transpose(1, 2) * s).masked_fill(~causal, -torch.inf), -1)
        dp = go @ vs.transpose(1, 2)
        ds = p * (dp - (dp * p).sum(-1, keepdim=True))
        dq[a:b] = (ds @ ks * s).transpose(0, 1).to(q.dtype)
        for out, grad in ((dk, ds.transpose(1, 2) @ qs * s), (dv, p.transpose(1, 2) @ go)):
            out[a:b] = grad.unflatten(0, (k.shape[1], groups)).sum(1).transpose(0, 1).to(k.dtype)
    return dq, dk, dv


@packed_causal_attention_backward.register_fake
def _(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_len: int,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    q, k, v, cu, max_len, scale = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu)
    ctx.max_len, ctx.scale = max_len, scale


def _backward(ctx: Any, grad_out: torch.Tensor, _grad_lse: Any) -> tuple[Any, ...]:
    q, k, v, out, lse, cu = ctx.saved_tensors
    dq, dk, dv = torch.ops.agentrl.packed_causal_attention_backward(
        grad_out, q, k, v, out, lse, cu, ctx.max_len, ctx.scale
    )
    return dq, dk, dv, None, None, None


packed_causal_attention.register_autograd(_backward, setup_context=_setup_context)
