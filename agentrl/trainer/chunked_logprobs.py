"""Token log-probs and entropy over a large vocabulary, computed in row chunks.

Why: the plain form (`log_softmax(logits.float() / T)`, then `exp`, product and sum for the
entropy) materializes several float32 `[tokens, vocab]` tensors and keeps them for backward;
at Qwen's 151,936-entry vocabulary that is ~0.6 MB per token per tensor, so the update
spends its time and memory moving logits around rather than in the model. Here each chunk
of rows is upcast to float32, reduced to (log p(token), entropy) and dropped; backward
recomputes the chunk's softmax from the saved logits (in their own dtype) and writes the
gradient straight into a logits-dtype buffer. Values equal the plain form's up to float32
rounding order.

`compiled=True` (`trainer.compile`) runs each chunk's forward and backward through inductor:
the cast, scale, reductions and gradient fuse into a few kernels that read the logits once or
twice instead of ~10 float32 passes per chunk (on an H200, eager, those passes were about
25 ms of a 0.5B model's 165 ms update). Chunks are then larger: nothing float32 is kept.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from agentrl.models.batch_invariant import inv_temperature, scaled_lse

CHUNK_ELEMENTS = 1 << 25  # float32 elements (~128 MiB) upcast at once (eager)
COMPILED_CHUNK_ELEMENTS = 1 << 28  # logits elements per compiled call (nothing upcast kept)


def _rows_per_chunk(vocab: int, compiled: bool = False) -> int:
    elements = COMPILED_CHUNK_ELEMENTS if compiled else CHUNK_ELEMENTS
    return max(1, elements // max(vocab, 1))


def fwd_chunk(
    logits: torch.Tensor, tokens: torch.Tensor, inv_temp: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(token), entropy) of one chunk of rows, in float32."""
    x, lse = scaled_lse(logits, inv_temp)  # the engine reports its log-probs from the same
    p = torch.exp(x - lse[:, None])
    return x.gather(-1, tokens[:, None]).squeeze(-1) - lse, lse - (p * x).sum(-1)


def bwd_chunk(
    logits: torch.Tensor, tokens: torch.Tensor, gl: torch.Tensor, ge: torch.Tensor, inv_temp: float
) -> torch.Tensor:
    """d/dlogits of sum(gl·logp + ge·H) for one chunk, in the logits' dtype:
    d logp_t/dx = onehot(t) - p; d H/dx = -p (x - E_p[x]); both times 1/T. The one-hot is a
    comparison (not a scatter) so inductor fuses it with the rest."""
    x = logits.float() * inv_temp
    p = torch.softmax(x, dim=-1)
    mean = (p * x).sum(-1, keepdim=True)
    cols = torch.arange(x.shape[-1], device=x.device)
    onehot = (cols[None, :] == tokens[:, None]).to(x.dtype)
    g = gl[:, None] * (onehot - p) - ge[:, None] * p * (x - mean)
    return (g * inv_temp).to(logits.dtype)


@cache
def _compiled() -> tuple[Any, Any]:
    return (
        torch.compile(fwd_chunk, dynamic=True, fullgraph=True),
        torch.compile(bwd_chunk, dynamic=True, fullgraph=True),
    )


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: torch.Tensor, tokens: torch.Tensor, inv_temp: float, compiled: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, vocab = logits.shape
        logp = torch.empty(n, dtype=torch.float32, device=logits.device)
        ent = torch.empty(n, dtype=torch.float32, device=logits.device)
        step = _rows_per_chunk(vocab, compiled)
        fwd = _compiled()[0] if compiled else fwd_chunk
        for a in range(0, n, step):
            logp[a : a + step], ent[a : a + step] = fwd(
                logits[a : a + step], tokens[a : a + step], inv_temp
            )
        ctx.save_for_backward(logits, tokens)
        ctx.inv_temp, ctx.compiled = inv_temp, compiled
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: torch.Tensor, g_ent: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        logits, tokens = ctx.saved_tensors
        n, vocab = logits.shape
        if ctx.compiled:
            return _ChunkedLogProbs._backward_compiled(ctx, logits, tokens, g_logp, g_ent)
        inv_temp = ctx.inv_temp
        grad = torch.empty_like(logits)
        step = _rows_per_chunk(vocab)
        g_logp = g_logp.float() if g_logp is not None else torch.zeros(n, device=logits.device)
        g_ent = g_ent.float() if g_ent is not None else torch.zeros(n, device=logits.device)
        for a in range(0, n, step):
            x = logits[a : a + step].float() * inv_temp
            p = torch.softmax(x, dim=-1)
            mean = (p * x).sum(-1, keepdim=True)
            gl, ge = g_logp[a : a + step, None], g_ent[a : a + step, None]
            g = -p * (gl + ge * (x - mean))
            g.scatter_add_(-1, tokens[a : a + step, None], gl)
            grad[a : a + step] = g * inv_temp
        return grad, None, None, None

    @staticmethod
    def _backward_compiled(
        ctx: Any,
        logits: torch.Tensor,
        tokens: torch.Tensor,
        g_logp: torch.Tensor | None,
        g_ent: torch.Tensor | None,
    ) -> tuple[torch.Tensor | None, ...]:
        n, vocab = logits.shape
        zeros = torch.zeros(n, device=logits.device)
        gl = g_logp.float() if g_logp is not None else zeros
        ge = g_ent.float() if g_ent is not None else zeros
        step = _rows_per_chunk(vocab, compiled=True)
        bwd = _compiled()[1]
        if n <= step:  # one call: its output is the gradient, no copy
            return bwd(logits, tokens, gl, ge, ctx.inv_temp), None, None, None
        grad = torch.empty_like(logits)
        for a in range(0, n, step):
            b = a + step
            grad[a:b] = bwd(logits[a:b], tokens[a:b], gl[a:b], ge[a:b], ctx.inv_temp)
        return grad, None, None, None


def chunked_token_log_probs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0, compiled: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(token), entropy) float32 per position of `logits` [..., V] under
    softmax(logits / temperature); same contract as `logprobs.token_log_probs`.
    `compiled`: inductor-fused chunks (see the module docstring); same values."""
    shape = tokens.shape
    flat = logits.reshape(-1, logits.shape[-1])
    inv_temp = inv_temperature(temperature)
    logp, ent = _ChunkedLogProbs.apply(flat, tokens.reshape(-1), inv_temp, compiled)
    return logp.reshape(shape), ent.reshape(shape)
