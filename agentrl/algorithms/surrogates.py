"""Policy losses that replace PPO's clipped token surrogate: SAPO, GPG, GMPO (`geo_mean`).

Why three: PPO's hard clip zeroes the gradient of every token outside the trust region, so a
few outlier ratios silence whole sequences. SAPO swaps the clip for a smooth sigmoid gate,
GMPO clips the *geometric mean* of a sequence's ratios (robust to single outlier tokens), and
GPG drops the surrogate entirely (plain REINFORCE with group advantages). Same signature as
every registered loss (see `losses`); names and defaults follow verl's `loss_mode`s.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentrl.algorithms.deferred import metric
from agentrl.algorithms.losses import (
    Metrics,
    _log_ratio,
    _ratio_metrics,
    _weighted,
    agg,
    register_policy_loss,
)
from agentrl.algorithms.masked import masked_mean
from agentrl.config.schema import AlgorithmConfig


@register_policy_loss("sapo")
def sapo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """SAPO (Gao et al. 2025): l = −f_τ(r)·A, f_τ(r) = σ(τ(r − 1))·4/τ, τ = tau_pos if A > 0
    else tau_neg.

    f has slope 1 at r = 1 (an on-policy step equals the plain policy gradient) and decays
    smoothly away from it instead of dropping to 0; tau_neg > tau_pos damps negative-advantage
    updates faster. Always aggregated seq-mean-token-mean (the paper's 1/|y_i|, as verl).
    """
    log_ratio = _log_ratio(log_probs, old_log_probs)
    ratio = log_ratio.exp()
    tau = torch.where(
        advantages > 0,
        torch.as_tensor(cfg.tau_pos, dtype=ratio.dtype, device=ratio.device),
        torch.as_tensor(cfg.tau_neg, dtype=ratio.dtype, device=ratio.device),
    )
    gate = torch.sigmoid(tau * (ratio - 1)) * (4.0 / tau)
    loss = agg(_weighted(-gate * advantages, is_weights), mask, cfg, "seq-mean-token-mean")
    metrics = _ratio_metrics(log_ratio.detach(), mask)
    metrics["sapo_gate_mean"] = metric(masked_mean(gate.detach(), mask))
    return loss, metrics


@register_policy_loss("gpg")
def gpg_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """GPG (Chu et al. 2025): l = −A·log π_θ, the policy gradient itself (no ratio, no clip).

    Meant for one on-policy pass per batch (`ppo_epochs: 1`); pair with
    `adv_estimator: gpg`. Aggregated with `loss_agg_mode` (the paper: token-mean).
    """
    loss = agg(_weighted(-advantages * log_probs, is_weights), mask, cfg)
    return loss, _ratio_metrics(_log_ratio(log_probs, old_log_probs).detach(), mask)


@register_policy_loss("geo_mean")
def geo_mean_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """GMPO (Zhao et al. 2025): maximise A_i · (Π_t r̃_t)^(1/|y_i|) per sequence.

    With s = sign(A_i) and d_t = log r_t: d̃_t = s·min(s·d_t, s·clip(d_t, −clip_low, clip_high))
    (the pessimistic side of a token-level clip, in log space), ratio_i = exp(mean_t d̃_t),
    l_i = −A_i·ratio_i with A_i the sequence's mean token advantage. Mean over sequences with
    a trained token (verl's `torch.mean` counts fully masked rows too; they have A = 0).
    The paper's clip range is wider than PPO's: ±0.4 in log space (clip_low = clip_high = 0.4).
    Under rollout correction each row is weighted by the geometric mean of its token weights.
    """
    log_ratio = _log_ratio(log_probs, old_log_probs)
    m = mask.to(log_ratio.dtype)
    sign = torch.sign(advantages)
    clipped = log_ratio.clamp(-cfg.clip_low, cfg.clip_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped)
    seq_ratio = masked_mean(pessimistic, m, dim=-1).exp()
    seq_adv = masked_mean(advantages, m, dim=-1)
    per_seq = -seq_adv * seq_ratio
    if is_weights is not None:
        log_w = torch.log(is_weights.detach() + 1e-10)
        per_seq = per_seq * masked_mean(log_w, m, dim=-1).exp()
    rows = (m.sum(dim=-1) > 0).to(per_seq.dtype)
    loss = masked_mean(per_seq, rows)
    metrics = _ratio_metrics(log_ratio.detach(), mask)
    hit = (clipped != log_ratio).float()
    metrics["clip_frac"] = metric(masked_mean(hit * (advantages > 0), mask))
    metrics["clip_frac_lower"] = metric(masked_mean(hit * (advantages < 0), mask))
    metrics["seq_ratio_mean"] = metric(masked_mean(seq_ratio.detach(), rows))
    return loss, metrics
