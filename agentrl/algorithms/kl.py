"""Per-token KL estimators between the policy and a reference (`algorithm.kl.*`).

Tokens are sampled from π, so each estimator is a function of the log-ratio
d = log π(y_t) − log π_ref(y_t) at the sampled token (Schulman, "Approximating KL"):

k1 (`k1`):           d                      unbiased for KL(π‖ref), can be negative
abs (`abs`):         |d|                    biased, ≥ 0
k2 (`k2`, `mse`):    ½·d²                   biased, ≥ 0, gradient of ½·d² is d·∇log π
k3 (`k3`, `low_var_kl`): e^(−d) + d − 1     unbiased, ≥ 0, low variance; clamped to [−10, 10]
                                            (and d to ±20) so an outlier token cannot blow up
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from agentrl.algorithms.deferred import metric
from agentrl.algorithms.masked import masked_mean

KLEstimator = Literal["k1", "abs", "k2", "mse", "k3", "low_var_kl"]
K3_CLAMP = 10.0
LOG_RATIO_CLAMP = 20.0


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, estimator: KLEstimator) -> Tensor:
    """Per-token KL estimate `[B, T]` (unmasked; mask it in aggregation)."""
    d = log_probs - ref_log_probs
    if estimator == "k1":
        return d
    if estimator == "abs":
        return d.abs()
    if estimator in ("k2", "mse"):
        return 0.5 * d.square()
    if estimator in ("k3", "low_var_kl"):
        neg = (-d).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return (neg.exp() - neg - 1).clamp(-K3_CLAMP, K3_CLAMP)
    raise ValueError(f"unknown KL estimator {estimator!r}; known: k1, abs, k2, mse, k3, low_var_kl")


def kl_penalized_rewards(
    token_rewards: Tensor,
    log_probs: Tensor,
    ref_log_probs: Tensor,
    mask: Tensor,
    coef: float,
    estimator: KLEstimator,
) -> tuple[Tensor, dict[str, float | Tensor]]:
    """r'_t = r_t − coef·KL_t on trained tokens (`algorithm.kl.placement: reward`, PPO-style).

    The penalty enters the return like any reward, so GAE credits it to earlier tokens too.
    """
    with torch.no_grad():
        kl = kl_penalty(log_probs, ref_log_probs, estimator) * mask
        metrics = {"kl_reward": masked_mean(kl, mask).item(), "kl_seq_mean": measured_kl(kl, mask)}
        return token_rewards - coef * kl, metrics


@torch.no_grad()
def measured_kl(kl: Tensor, mask: Tensor) -> float | Tensor:
    """The batch's KL as the adaptive controller reads it: the mean over sequences (with a
    trained token) of each sequence's mean per-token estimate (verl's `current_kl`)."""
    m = mask.to(kl.dtype)
    rows = (m.sum(dim=-1) > 0).to(kl.dtype)
    return metric(masked_mean(masked_mean(kl, m, dim=-1), rows))
