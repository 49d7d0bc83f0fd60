"""Batch-invariant kernels (`model.kernels: batch_invariant`): the engine and the trainer
compute bit-identical log-probs for the same tokens.

Why: the rollout engine decodes one token per step for a batch of requests (matmuls with
M = batch rows, attention of one query over a left-padded KV cache with holes), while the
trainer recomputes the same tokens with one full-sequence forward over a right-padded batch
(M = all tokens, causal attention). A BLAS picks its blocking and kernels by the matrix
shape, SDPA reduces over however many keys the layout has, and so the two sides differ in
the last bits (~1e-6 on CPU float32), which the importance correction then "corrects". Here
every op whose result for one token could depend on the other rows or on the layout is
replaced by one whose reduction order is fixed by the token's own data:

- linear layers (`aten.mm`/`addmm`/`bmm`): the rows are cut into blocks of exactly
  `ROW_BLOCK` (zero-padded, each in a fresh buffer) and each block is one BLAS call of the
  same shape, so a row's result never depends on M or on its neighbours (checked per shape in
  tests/trainer/test_batch_invariant.py, across 1 and 2 threads);
- attention (`agentrl_batch_invariant`, registered with transformers): per query, the keys
  it may see are gathered to the front in key order, and scores (over the head dim) and the
  softmax's sums (over keys) are pairwise trees of elementwise adds over a power-of-two
  length; the zero padding past the valid keys only adds exact zeros, so decode over a cache
  and a full causal forward give the same bits;
- row means/sums over the last dim (RMSNorm): the same pairwise tree.

Everything else a decoder does (embeddings, rotary, activations, residual adds) is
elementwise and already row-independent. The mode is entered by forward hooks on the model,
so every role's forward (engine, actor, reference, critic) runs it and backward keeps
torch's own kernels (gradients flow; they are not batch-invariant, and need not be).

Cost: the blocked matmuls waste the padding of the last block (decode of 3 rows pays for
`ROW_BLOCK`), and attention is elementwise rather than fused (memory ~ queries x keys x head
dim, in chunks of `CHUNK_ELEMENTS`); benchmarks/batch_invariant.py measures it. Proven on
CPU float32 only: a GPU's kernels are not covered. Torch's reductions outside these ops are
row-independent only single-threaded, so the run must use one intra-op thread (checked at
config time: `trainer.cpu_threads: 1`).
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

KERNELS = ("default", "batch_invariant")
ATTENTION = "agentrl_batch_invariant"
ROW_BLOCK = 16  # rows per BLAS call; every call has this M
CHUNK_ELEMENTS = 1 << 22  # attention's [B, H, queries, keys, D] temporaries, per chunk

aten = torch.ops.aten
_ACTIVE = threading.local()  # the modes the forward hooks entered, per thread


def pad_pow2(x: torch.Tensor, dim: int) -> torch.Tensor:
    """`x` zero-padded along `dim` to the next power of two (the trees' fixed shape)."""
    dim = dim % x.dim()
    n = x.shape[dim]
    width = 1 << max(n - 1, 0).bit_length()
    if width == n:
        return x
    pad = list(x.shape)
    pad[dim] = width - n
    return torch.cat([x, x.new_zeros(pad)], dim)


def tree_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum over `dim` as a pairwise tree over the next power of two (zero-padded): the order
    depends only on where the nonzero entries sit, never on the padded length."""
    dim = dim % x.dim()
    x = pad_pow2(x, dim)
    while x.shape[dim] > 1:
        half = x.shape[dim] // 2
        x = x.narrow(dim, 0, half) + x.narrow(dim, half, half)
    return x.squeeze(dim)


def block_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` for `a` [M, K], one BLAS call per `ROW_BLOCK` rows, every call the same shape
    on 64-byte aligned rows (one zero-padded copy of `a`)."""
    rows, k = a.shape
    blocks = -(-rows // ROW_BLOCK)
    padded = a.new_zeros(blocks * ROW_BLOCK, k)
    padded[:rows] = a
    out = a.new_empty(rows, b.shape[1])
    for i in range(blocks):
        lo, hi = i * ROW_BLOCK, (i + 1) * ROW_BLOCK
        if hi <= rows:
            torch.mm(padded[lo:hi], b, out=out[lo:hi])
        else:
            out[lo:] = torch.mm(padded[lo:hi], b)[: rows - lo]
    return out


def _matmul(func: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b` through `block_mm`: `[..., K] @ [K, N]` with the rows flattened, or a batch of
    `[M, K] @ [K, N]`; other shapes are not in a decoder's forward and are refused."""
    if b.dim() == 2:
        out = block_mm(a.reshape(-1, a.shape[-1]), b)
        return out.reshape(*a.shape[:-1], b.shape[1])
    if a.dim() == b.dim() == 3:
        return torch.stack([block_mm(a[i], b[i]) for i in range(a.shape[0])])
    raise NotImplementedError(f"batch_invariant: {func} of shapes {a.shape} @ {b.shape}")


def _last_dim(x: torch.Tensor, dims: Any) -> bool:
    if not x.is_floating_point() or dims is None:
        return False
    dims = [dims] if isinstance(dims, int) else list(dims)
    return len(dims) == 1 and dims[0] % x.dim() == x.dim() - 1


class BatchInvariantMode(TorchDispatchMode):
    """Routes the batch-sensitive aten ops of a forward to the fixed-order versions above."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is aten.mm.default:
            return block_mm(args[0], args[1])
        if func is aten.addmm.default:
            bias, a, b = args[:3]
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            out = block_mm(a, b)
            out = out if alpha == 1 else out * alpha
            return out + (bias if beta == 1 else bias * beta)
        if func in (aten.bmm.default, aten.matmul.default):  # matmul: under inference_mode
            return _matmul(func, args[0], args[1])
        if func is aten.linear.default:  # reaches the mode undecomposed under inference_mode
            x, weight = args[:2]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            out = _matmul(func, x, weight.t())
            return out if bias is None else out + bias
        if func in (aten.mean.dim, aten.sum.dim_IntList) and _last_dim(args[0], args[1]):
            x = args[0]
            keep = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
            if kwargs.get("dtype") is not None:
                x = x.to(kwargs["dtype"])
            out = tree_sum(x, -1)
            if func is aten.mean.dim:
                out = out / x.shape[-1]
            return out.unsqueeze(-1) if keep else out
        return func(*args, **kwargs)


def _enter(module: Any, args: Any) -> None:
    mode = BatchInvariantMode()
    mode.__enter__()
    stack = getattr(_ACTIVE, "modes", None)
    if stack is None:
        stack = _ACTIVE.modes = []
    stack.append(mode)


def _exit(module: Any, args: Any, output: Any) -> None:
    stack = getattr(_ACTIVE, "modes", None)
    if stack:
        stack.pop().__exit__(None, None, None)


def _valid_keys(mask: torch.Tensor | None, q: torch.Tensor, sk: int) -> torch.Tensor:
    """[B, 1|H, Sq, Sk] bool: which keys each query sees (no mask: causal, newest last)."""
    b, _, sq, _ = q.shape
    if mask is None:
        rows = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
        return (torch.arange(sk, device=q.device)[None, :] <= rows).expand(b, 1, sq, sk)
    mask = mask[:, :, :, :sk]
    return mask if mask.dtype == torch.bool else mask == 0


def _attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, scale: float
) -> torch.Tensor:
    """`k`/`v` [B, H, P, D] hold each row's real keys first, in key order (P a power of two),
    so every query's keys are a prefix and the rest adds exact zeros to the trees."""
    scores = tree_sum(q[:, :, :, None, :] * k[:, :, None, :, :], -1) * scale  # [b, h, n, P]
    s = scores.masked_fill(~valid, float("-inf"))
    top = s.amax(-1, keepdim=True).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    p = torch.exp(s - top)  # exactly 0 past the valid keys
    denom = tree_sum(p, -1)
    numer = tree_sum(p[..., None] * v[:, :, None], 3)  # [b, h, n, D]
    return numer / torch.where(denom > 0, denom, torch.ones_like(denom))[..., None]


def _compact(
    key: torch.Tensor, value: torch.Tensor, valid: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Each batch row's real keys (seen by any of its queries) moved to the front in key
    order, zero-padded to a power of two: a causal query's keys are then a prefix whatever
    the layout (left padding, holes, right padding)."""
    b, h, sk, d = key.shape
    real = valid.any(dim=2, keepdim=True)  # [B, 1, 1, Sk]
    order = torch.argsort((~real).to(torch.uint8), dim=-1, stable=True)
    kv_order = order[:, :, 0, :, None].expand(b, h, sk, d)
    key, value = key.gather(2, kv_order), value.gather(2, kv_order)
    valid = valid.gather(-1, order.expand(*valid.shape[:3], sk))
    return pad_pow2(key, 2), pad_pow2(value, 2), pad_pow2(valid, -1)


def batch_invariant_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature: q/k/v `[B, heads, S, D]` in, `[B, S, heads, D]` out.
    Each query reduces over exactly its valid keys, in key order, with fixed trees."""
    if dropout:
        raise ValueError("model.kernels=batch_invariant has no attention dropout")
    heads, d = query.shape[1], query.shape[3]
    if key.shape[1] != heads:  # grouped-query attention: exact copies of the kv heads
        key = key.repeat_interleave(heads // key.shape[1], dim=1)
        value = value.repeat_interleave(heads // value.shape[1], dim=1)
    valid = _valid_keys(attention_mask, query, key.shape[2])
    key, value, valid = _compact(key, value, valid)
    sk = key.shape[2]
    scale = scaling if scaling is not None else d**-0.5
    step = max(1, CHUNK_ELEMENTS // max(1, query.shape[0] * heads * sk * d))
    parts = [
        _attend(query[:, :, a : a + step], key, value, valid[:, :, a : a + step], scale)
        for a in range(0, query.shape[2], step)
    ]
    out = torch.cat(parts, dim=2) if len(parts) > 1 else parts[0]
    return out.transpose(1, 2).contiguous(), None


def inv_temperature(temperature: float) -> float:
    """1/T as the trainer multiplies logits by it (a python float, rounded once): the engine
    takes its reported log-probs' scale from here too, so the two agree bit for bit."""
    return 1.0 / max(temperature, 1e-6)


def scaled_lse(logits: torch.Tensor, inv_temp: float | torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(x, logsumexp(x)) with x = logits (float32) * inv_temp: the one form the engine's
    reported log-probs and the trainer's recomputed ones are both taken from,
    log p(t) = x[t] - lse (a python float and a float32 `[N, 1]` tensor give the same x)."""
    x = logits.float() * inv_temp
    return x, torch.logsumexp(x, dim=-1)


def _explicit_mask(*args: Any, **kwargs: Any) -> Any:
    """transformers' SDPA boolean mask, never skipped: the attention reads every query's keys
    from it (holes and left padding in the engine's cache included)."""
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def apply_kernels(model: torch.nn.Module, kernels: str) -> torch.nn.Module:
    """Install `kernels` on a transformers model (in place): the one seam of `model.kernels`."""
    if kernels not in KERNELS:
        raise ValueError(f"model.kernels: {kernels!r} is not one of {', '.join(KERNELS)}")
    if kernels == "default":
        return model
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(ATTENTION, batch_invariant_attention)
    AttentionMaskInterface.register(ATTENTION, _explicit_mask)
    hf: Any = model  # a transformers PreTrainedModel
    hf.set_attn_implementation(ATTENTION)
    model.register_forward_pre_hook(_enter)
    model.register_forward_hook(_exit, always_call=True)
    return model
