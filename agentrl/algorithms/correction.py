"""Rollout/train mismatch correction (`algorithm.tis_mode`, `algorithm.tis_cap`).

The engine (vLLM/SGLang, bf16, different kernels) samples from π_rollout, while the trainer
computes π_old for the same tokens; the gap biases the policy gradient. With ρ = π_old/π_rollout:

none:          w = 1
token:         w_t = min(ρ_t, cap)                    (truncated IS, per token)
sequence:      w_i = min(Π_t ρ_t, cap)                (truncated IS, whole sequence)
token_mask:    w_t = ρ_t·1[1/cap ≤ ρ_t ≤ cap]         (masked IS: drop outlier tokens)
sequence_mask: w_i = ρ_i·1[1/cap ≤ ρ_i ≤ cap], ρ_i = Π_t ρ_t (drop outlier sequences)

Weights are detached and 0 off the mask. In the *_mask modes `weights > 0` is the kept set;
pass `mask * (weights > 0)` to the loss as well to drop rejected tokens from its denominator.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor

from agentrl.algorithms.deferred import metric
from agentrl.algorithms.masked import masked_mean

TISMode = Literal["none", "token", "sequence", "token_mask", "sequence_mask"]
LOG_RATIO_CLAMP = 20.0


@torch.no_grad()
def importance_weights(
    old_log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    mode: TISMode,
    cap: float,
) -> tuple[Tensor, dict[str, float | Tensor]]:
    """Detached IS weights `[B, T]` correcting π_rollout → π_old, plus mismatch metrics."""
    if mode != "none" and cap <= 1:
        raise ValueError(f"tis_cap must be > 1, got {cap}")
    m = mask.to(old_log_probs.dtype)
    log_rho = (old_log_probs - rollout_log_probs) * m
    log_cap = math.log(cap) if cap > 1 else 0.0
    if mode in ("sequence", "sequence_mask"):
        log_rho = log_rho.sum(dim=-1, keepdim=True).expand_as(m)
    log_rho = log_rho.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    rho = log_rho.exp()
    if mode == "none":
        weights = torch.ones_like(m)
    elif mode in ("token", "sequence"):
        weights = rho.clamp(max=cap)
    elif mode in ("token_mask", "sequence_mask"):
        weights = rho * (log_rho.abs() <= log_cap)
    else:
        raise ValueError(f"unknown tis_mode {mode!r}")
    weights = weights * m
    changed = (weights != rho).to(m.dtype)
    token_rho = (old_log_probs - rollout_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    metrics = {
        "tis_weight_mean": metric(masked_mean(weights, m)),
        "tis_changed_frac": 0.0 if mode == "none" else metric(masked_mean(changed, m)),
        # k3 estimate of KL(π_rollout‖π_old) on the sampled tokens.
        "rollout_kl": metric(masked_mean(token_rho.exp() - 1 - token_rho, m)),
        # Mean |log π_old - log π_rollout|: exactly 0 only when the engine and the trainer
        # agree bit for bit (`model.kernels: batch_invariant`); k3 above rounds to 0.0 in
        # float32 for gaps of ~1e-7, so it cannot tell.
        "rollout_logp_absdiff": metric(masked_mean((old_log_probs - rollout_log_probs).abs(), m)),
    }
    return weights, metrics


# Keys of `ratio_moments`: token count and the first two moments of ρ = π_old/π_rollout.
RATIO_MOMENTS = ("is_ratio/n", "is_ratio/s1", "is_ratio/s2")


@torch.no_grad()
def ratio_moments(
    old_log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor
) -> dict[str, float | Tensor]:
    """Sums over the sampled tokens of 1, ρ and ρ²: metrics that average over micro-batches
    and ranks into an exact pooled spread (`ratio_spread`), where the update computes π_old
    itself (no separate old-log-prob forward)."""
    m = mask.to(old_log_probs.dtype)
    rho = (old_log_probs - rollout_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP).exp() * m
    n, s1, s2 = m.sum(), rho.sum(), (rho * rho).sum()
    return dict(zip(RATIO_MOMENTS, (metric(n), metric(s1), metric(s2)), strict=True))


def ratio_spread(metrics: dict[str, float]) -> dict[str, float]:
    """Pops `ratio_moments`' keys (averaged alike, so their ratios are exact) and returns the
    mean and standard deviation of ρ; empty when they are absent."""
    n, s1, s2 = (metrics.pop(k, None) for k in RATIO_MOMENTS)
    if not n or s1 is None or s2 is None:
        return {}
    mean = s1 / n
    return {"is_ratio_mean": mean, "is_ratio_std": math.sqrt(max(s2 / n - mean * mean, 0.0))}
