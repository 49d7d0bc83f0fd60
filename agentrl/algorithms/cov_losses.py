"""Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs").

Why: the policy's entropy falls in proportion to the covariance between a token's log-prob and
its advantage, Cov_t = (log π_t − mean log π)·(A_t − mean A); a handful of high-covariance
tokens (confident and rewarded) drive the collapse. Clip-Cov drops the gradient of a small
random share of tokens inside a covariance window; KL-Cov adds a |log r| penalty to the
top-covariance share. The means run over the trained tokens of the batch the loss is given (a
micro-batch under gradient accumulation, as in verl). Selection is detached.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentrl.algorithms.deferred import metric
from agentrl.algorithms.losses import (
    Metrics,
    _clip_surrogate,
    _log_ratio,
    _ratio_metrics,
    _weighted,
    agg,
    register_policy_loss,
)
from agentrl.algorithms.masked import masked_mean
from agentrl.config.schema import AlgorithmConfig


@torch.no_grad()
def token_covariance(log_probs: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """Cov_t = (log π_t − mean log π)(A_t − mean A), means over the masked tokens; `[B, T]`."""
    m = mask.to(log_probs.dtype)
    lp = log_probs.detach()
    return (lp - masked_mean(lp, m)) * (advantages - masked_mean(advantages, m))


@register_policy_loss("clip_cov")
def clip_cov_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """PPO's clipped surrogate (no dual clip), with the loss of n = max(⌊clip_cov_ratio·N⌋, 1)
    tokens set to 0: drawn uniformly (torch's global RNG, as verl) among trained tokens with
    clip_cov_lb < Cov_t < clip_cov_ub that PPO's clip did not already cut. N = trained tokens.
    """
    if cfg.clip_cov_ratio <= 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {cfg.clip_cov_ratio}")
    log_ratio = _log_ratio(log_probs, old_log_probs)
    loss_mat, clip_hit = _clip_surrogate(advantages, log_ratio.exp(), cfg)
    trained = mask > 0
    cov = token_covariance(log_probs, advantages, mask)
    window = trained & ~clip_hit & (cov > cfg.clip_cov_lb) & (cov < cfg.clip_cov_ub)
    candidates = window.nonzero()
    n = max(int(cfg.clip_cov_ratio * int(trained.sum())), 1)
    keep = torch.ones_like(loss_mat)
    if len(candidates):
        picked = candidates[torch.randperm(len(candidates))[:n].to(candidates.device)]
        keep[picked[:, 0], picked[:, 1]] = 0.0
    loss = agg(_weighted(loss_mat * keep, is_weights), mask, cfg)
    metrics = _ratio_metrics(log_ratio.detach(), mask)
    metrics["clip_frac"] = metric(masked_mean(clip_hit.float(), mask))
    metrics["cov_frac"] = metric(masked_mean((keep == 0).float(), mask))
    return loss, metrics


@register_policy_loss("kl_cov")
def kl_cov_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """Unclipped surrogate l = −A·r, plus ppo_kl_coef·|log r| on the k = max(⌊kl_cov_ratio·N⌋, 1)
    trained tokens of largest Cov_t (no clipping elsewhere: the penalty is the trust region).
    """
    if cfg.kl_cov_ratio <= 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {cfg.kl_cov_ratio}")
    log_ratio = _log_ratio(log_probs, old_log_probs)
    loss_mat = -advantages * log_ratio.exp()
    trained = mask > 0
    penalised = torch.zeros_like(trained)
    n_trained = int(trained.sum())
    if n_trained:
        cov = token_covariance(log_probs, advantages, mask)[trained]
        k = max(int(n_trained * cfg.kl_cov_ratio), 1)
        flat = trained.flatten().nonzero().flatten()[cov.topk(k).indices]
        penalised = penalised.flatten().index_fill(0, flat, True).view_as(trained)
    loss_mat = loss_mat + cfg.ppo_kl_coef * log_ratio.abs() * penalised
    loss = agg(_weighted(loss_mat, is_weights), mask, cfg)
    metrics = _ratio_metrics(log_ratio.detach(), mask)
    metrics["cov_frac"] = metric(masked_mean(penalised.float(), mask))
    return loss, metrics
