"""Token log-probs and entropy over a large vocabulary, computed in row chunks.

Why: the plain form (`log_softmax(logits.float() / T)`, then `exp`, product and sum for the
entropy) materializes several float32 `[tokens, vocab]` tensors and keeps them for backward;
at Qwen's 151,936-entry vocabulary that is ~0.6 MB per token per tensor, so the update
spends its time and memory moving logits around rather than in the model. Here each chunk
of rows is upcast to float32, reduced to (log p(token), entropy) and dropped; backward
recomputes the chunk's softmax from the saved logits (in their own dtype) and writes the
gradient straight into a logits-dtype buffer. Values equal the plain form's up to float32
rounding order.
"""

from __future__ import annotations

from typing import Any

import torch

CHUNK_ELEMENTS = 1 << 25  # float32 elements (~128 MiB) upcast at once


def _rows_per_chunk(vocab: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(vocab, 1))


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: torch.Tensor, tokens: torch.Tensor, inv_temp: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, vocab = logits.shape
        logp = torch.empty(n, dtype=torch.float32, device=logits.device)
        ent = torch.empty(n, dtype=torch.float32, device=logits.device)
        step = _rows_per_chunk(vocab)
        for a in range(0, n, step):
            x = logits[a : a + step].float() * inv_temp
            lse = torch.logsumexp(x, dim=-1)
            p = torch.exp(x - lse[:, None])
            logp[a : a + step] = x.gather(-1, tokens[a : a + step, None]).squeeze(-1) - lse
            ent[a : a + step] = lse - (p * x).sum(-1)
        ctx.save_for_backward(logits, tokens)
        ctx.inv_temp = inv_temp
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: torch.Tensor, g_ent: torch.Tensor
    ) -> tuple[torch.Tensor, None, None]:
        """d logp_t/dx = onehot(t) - p; d H/dx = -p (x - E_p[x]); both times 1/T."""
        logits, tokens = ctx.saved_tensors
        inv_temp = ctx.inv_temp
        n, vocab = logits.shape
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
        return grad, None, None


def chunked_token_log_probs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(token), entropy) float32 per position of `logits` [..., V] under
    softmax(logits / temperature); same contract as `logprobs.token_log_probs`."""
    shape = tokens.shape
    flat = logits.reshape(-1, logits.shape[-1])
    inv_temp = 1.0 / max(temperature, 1e-6)
    logp, ent = _ChunkedLogProbs.apply(flat, tokens.reshape(-1), inv_temp)
    return logp.reshape(shape), ent.reshape(shape)
