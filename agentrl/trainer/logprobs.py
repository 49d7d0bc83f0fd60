"""Log-probabilities of response tokens under a model: the trainer's side of token exactness.

The rollout engine returns logprobs of the temperature-scaled distribution; recomputing them
here on the same ids (never re-tokenized) is what makes importance ratios meaningful.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from agentrl.models.batch_invariant import inv_temperature

from .batch import TrainBatch
from .chunked_logprobs import chunked_token_log_probs
from .fused_head import FusedHead


def forward_logits(model: Any, batch: TrainBatch) -> torch.Tensor:
    """Logits at the positions that predict each response token: `[B, T, V]`."""
    extra: dict[str, Any] = {}
    if batch.multimodal:
        from agentrl.trainer.multimodal import stack_multimodal

        extra = stack_multimodal(batch.multimodal, batch.input_ids.device, batch.input_ids)
    index = batch.logit_index
    first = _keep_from(model, index)
    if first:  # lm_head only from the first response-predicting position on
        keep = torch.arange(first, batch.input_ids.shape[1], device=index.device)
        extra["logits_to_keep"] = keep
        index = index - first
    out = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False, **extra
    )
    logits = out.logits if hasattr(out, "logits") else out
    rows = torch.arange(batch.size, device=logits.device)[:, None]
    return logits[rows, index.clamp(min=0)]


def _keep_from(model: Any, index: torch.Tensor) -> int:
    """First sequence position whose logits are needed (0 = all, or the model cannot skip).
    Why: the prompt's logits are never used, and at a 152k vocabulary the lm_head and its
    [B, S, V] output are a large share of the forward; transformers' `logits_to_keep` skips
    them. Only for models whose forward takes it."""
    fwd = getattr(model, "forward", None)
    try:
        if fwd is None or "logits_to_keep" not in inspect.signature(fwd).parameters:
            return 0
    except (TypeError, ValueError):
        return 0
    valid = index[index >= 0]
    return int(valid.min()) if valid.numel() else 0


def token_log_probs(
    logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(token), entropy) per position, in float32, of softmax(logits / temperature)."""
    logp_all = torch.log_softmax(logits.float() / max(temperature, 1e-6), dim=-1)
    logp = logp_all.gather(-1, tokens[..., None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def response_log_probs(
    model: Any,
    batch: TrainBatch,
    temperature: float = 1.0,
    compiled: bool = False,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, entropy) `[B, T]` of the batch's response tokens; 0 beyond each response.
    `compiled`: the log-softmax reduction through inductor (`trainer.compile`); `fused`: from
    the hidden states at the response positions through the fused head (`fused_head`), no
    logits held (models without a plain lm-head, and multimodal batches, run materialized)."""
    head = FusedHead.of(model) if fused and not batch.multimodal else None
    if head is None:
        logits = forward_logits(model, batch)
        logp, ent = chunked_token_log_probs(logits, batch.responses, temperature, compiled)
    else:
        hidden = head.hidden(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False
        )
        rows = torch.arange(batch.size, device=hidden.device)[:, None]
        at = hidden[rows, batch.logit_index.clamp(min=0)]
        logp, ent = head.log_probs(at, batch.responses, temperature, compiled)
    valid = (batch.logit_index >= 0).to(logp.dtype)
    return logp * valid, ent * valid


@torch.no_grad()
def batched_log_probs(
    model: Any,
    batch: TrainBatch,
    micro_batch_size: int,
    temperature: float = 1.0,
    fn: Any = response_log_probs,
) -> torch.Tensor:
    """`fn` (padded `response_log_probs` or a packed forward) over micro-batches (the usual
    OOM lever), padded back to `[B, T]`."""
    out = torch.zeros(batch.responses.shape, dtype=torch.float32)
    for start in range(0, batch.size, micro_batch_size):
        idx = list(range(start, min(start + micro_batch_size, batch.size)))
        sub = batch.select(idx)
        logp, _ = fn(model, sub, temperature)
        out[idx, : logp.shape[1]] = logp.float().cpu()
    return out


def role_log_probs(
    model: Any, backend: Any, batch: TrainBatch, micro_batch_size: int, temperature: float, fn: Any
) -> torch.Tensor:
    """Old or reference log-probs of a role's model: on its device for the pass (offload),
    micro-batched, through the role's forward `fn` (padded or packed)."""
    with backend.on_device(model):
        return batched_log_probs(model, batch.to(backend.device), micro_batch_size, temperature, fn)


SUM_PI_SQ_ROWS = 1 << 25  # float32 logits elements upcast at once


@torch.no_grad()
def batched_sum_pi_squared(
    model: Any, batch: TrainBatch, micro_batch_size: int, temperature: float = 1.0
) -> torch.Tensor:
    """Σ_v π(v)² `[B, T]` of softmax(logits / temperature) at every response position (0
    beyond each response), for the optimal token baseline's variance proxy. A padded forward
    per micro-batch; logits are reduced in row chunks so no `[tokens, vocab]` float32 copy of
    the whole micro-batch is kept."""
    out = torch.zeros(batch.responses.shape, dtype=torch.float32)
    inv_temp = inv_temperature(temperature)
    for start in range(0, batch.size, micro_batch_size):
        idx = list(range(start, min(start + micro_batch_size, batch.size)))
        sub = batch.select(idx)
        logits = forward_logits(model, sub)
        flat = logits.reshape(-1, logits.shape[-1])
        step = max(1, SUM_PI_SQ_ROWS // max(flat.shape[-1], 1))
        sq = torch.cat(
            [
                torch.softmax(flat[a : a + step].float() * inv_temp, dim=-1).square().sum(-1)
                for a in range(0, flat.shape[0], step)
            ]
        ).view(logits.shape[:-1])
        valid = (sub.logit_index >= 0).to(sq.dtype)
        out[idx, : sq.shape[1]] = (sq * valid).cpu()
    return out
