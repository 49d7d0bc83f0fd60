"""Token log-probs and entropy straight from hidden states and the lm-head weight
(`trainer.update_path: fused`): the `[tokens, vocab]` logits are never held for the batch.

Why: the materialized path runs the lm-head over every needed position, keeps the logits
(`[tokens, vocab]` in the model's dtype: 1 GB for 3.5k tokens at Qwen's 151,936-entry
vocabulary in bf16) for backward, and then allocates their gradient, as large again, before
the lm-head's own backward. Here rows are processed in chunks: each chunk's logits are
computed (`hidden @ weightᵀ`), reduced to (log p(token), entropy) by the same chunk kernels
as `chunked_logprobs` and dropped; backward recomputes them chunk by chunk, turns them into
the logits' gradient and multiplies it straight into the hidden states' and the weight's
gradients. Peak memory falls by about two logits tensors for one more lm-head matmul in
backward (a few percent of a step's FLOPs; the MFU convention does not count recompute).

Values equal the materialized path's up to float rounding order: each row's logits are the
same dot products, and the weight's gradient is summed over chunks in float32 (in one
product when the rows fit one chunk, exactly as the lm-head's own backward).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

from agentrl.models.batch_invariant import inv_temperature

from .chunked_logprobs import bwd_chunk, fwd_chunk

CHUNK_ELEMENTS = 1 << 28  # logits elements per chunk (512 MiB in bf16): the memory bound
# Causal LMs whose transformers forward is exactly `lm_head(decoder(...).last_hidden_state)`
# (checked in transformers 5): no logit soft-capping (Gemma-2/3), scaling (Cohere, Granite)
# or anything else after the head. Other models run materialized.
PLAIN_HEAD_MODELS = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "phi3",
     "smollm3", "olmo2", "gemma"}
)  # fmt: skip
# Causal LMs whose only step after the head is logit soft-capping, and only when their config
# sets `final_logit_softcapping` (Gemma 2 does by default; Gemma 3, e.g. the 270M preset,
# does not): without it they are plain too. Gemma 3's 262k vocabulary is where the fused
# path matters most (its materialized logits are 1 MB a token in fp32).
SOFTCAP_HEAD_MODELS = frozenset({"gemma2", "gemma3_text"})


def _rows(vocab: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(vocab, 1))


def _head_fwd(
    hidden: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor, inv_temp: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return fwd_chunk(F.linear(hidden, weight), tokens, inv_temp)


def _head_bwd(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    tokens: torch.Tensor,
    gl: torch.Tensor,
    ge: torch.Tensor,
    inv_temp: float,
) -> torch.Tensor:
    """The chunk's logits gradient, in the logits' dtype (as the lm-head's backward gets it)."""
    return bwd_chunk(F.linear(hidden, weight), tokens, gl, ge, inv_temp)


@cache
def _compiled() -> tuple[Any, Any]:
    return (
        torch.compile(_head_fwd, dynamic=True, fullgraph=True),
        torch.compile(_head_bwd, dynamic=True, fullgraph=True),
    )


class _FusedHeadLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        tokens: torch.Tensor,
        inv_temp: float,
        compiled: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        ent = torch.empty(n, dtype=torch.float32, device=hidden.device)
        fwd = _compiled()[0] if compiled else _head_fwd
        step = _rows(weight.shape[0])
        for a in range(0, n, step):
            b = a + step
            logp[a:b], ent[a:b] = fwd(hidden[a:b], weight, tokens[a:b], inv_temp)
        ctx.save_for_backward(hidden, weight, tokens)
        ctx.inv_temp, ctx.compiled = inv_temp, compiled
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, g_logp: torch.Tensor | None, g_ent: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, tokens = ctx.saved_tensors
        n = hidden.shape[0]
        zeros = torch.zeros(n, device=hidden.device)
        gl = g_logp.float() if g_logp is not None else zeros
        ge = g_ent.float() if g_ent is not None else zeros
        bwd = _compiled()[1] if ctx.compiled else _head_bwd
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        step = _rows(weight.shape[0])
        if n <= step:  # one chunk: the lm-head's own backward, term for term
            g = bwd(hidden, weight, tokens, gl, ge, ctx.inv_temp)
            grad_h = g @ weight if want_h else None
            grad_w = g.t() @ hidden if want_w else None
            return grad_h, grad_w, None, None, None
        grad_h = torch.empty_like(hidden) if want_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for a in range(0, n, step):
            b = a + step
            h = hidden[a:b]
            g = bwd(h, weight, tokens[a:b], gl[a:b], ge[a:b], ctx.inv_temp)
            if grad_h is not None:
                grad_h[a:b] = g @ weight
            if want_w:
                if g.dtype == torch.float32:
                    grad_w.addmm_(g.t(), h)
                else:
                    grad_w += (g.t() @ h).float()
        return grad_h, grad_w.to(weight.dtype) if want_w else None, None, None, None


def fused_token_log_probs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    tokens: torch.Tensor,
    temperature: float = 1.0,
    compiled: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(token), entropy) float32 `[...]` of softmax(hidden @ weightᵀ / temperature) for
    hidden states `[..., d]` and a bias-free lm-head `weight` `[V, d]`; the contract of
    `chunked_token_log_probs` on the logits the lm-head would give. `compiled`: each chunk's
    product and reduction through inductor (`trainer.compile`)."""
    shape = tokens.shape
    flat = hidden.reshape(-1, hidden.shape[-1])
    inv_temp = inv_temperature(temperature)
    logp, ent = _FusedHeadLogProbs.apply(flat, weight, tokens.reshape(-1), inv_temp, compiled)
    return logp.reshape(shape), ent.reshape(shape)


class FusedHead:
    """A causal LM split where the fused head needs it: its decoder (embeddings, layers and
    final norm: the hidden states) and its lm-head weight. `of(model)` returns None when the
    model has no plain split (no HF decoder, an lm-head with a bias or wrapped by an adapter),
    or a model type outside `PLAIN_HEAD_MODELS` (and not an uncapped `SOFTCAP_HEAD_MODELS`
    one), so the caller keeps the materialized path."""

    def __init__(self, decoder: Any, head: torch.nn.Linear) -> None:
        self.decoder, self.head = decoder, head

    @staticmethod
    def of(model: Any) -> FusedHead | None:
        config = getattr(model, "config", None)
        if not isinstance(model, torch.nn.Module) or config is None:
            return None
        kind = getattr(config, "model_type", None)
        capped = getattr(config, "final_logit_softcapping", None) is not None
        if kind not in PLAIN_HEAD_MODELS and (kind not in SOFTCAP_HEAD_MODELS or capped):
            return None
        hf: Any = (
            model  # a transformers PreTrainedModel; torch types its methods as Tensor | Module
        )
        try:
            decoder, head = hf.get_decoder(), hf.get_output_embeddings()
        except (AttributeError, NotImplementedError):
            return None
        if type(head) is not torch.nn.Linear or head.bias is not None or decoder is None:
            return None
        return FusedHead(decoder, head)

    def hidden(self, **kwargs: Any) -> torch.Tensor:
        """The decoder's last hidden states (final norm applied), `[B, S, d]`."""
        out = self.decoder(**kwargs)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]

    def log_probs(
        self, hidden: torch.Tensor, tokens: torch.Tensor, temperature: float, compiled: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return fused_token_log_probs(hidden, self.head.weight, tokens, temperature, compiled)
