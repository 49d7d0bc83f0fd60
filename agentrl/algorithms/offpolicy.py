"""Off-policy PPO: which policy the ratio clips against, and which samples are rejected.

Three policies meet in one update. π_behav sampled the tokens (the engine's per-token
log-probs: a few weight versions old under `trainer.async`, and computed by other kernels);
π_prox is the trainer's policy at the start of the update (the recomputed old log-probs);
π_θ is being optimised. `algorithm.off_policy` picks how the loss uses them:

standard:  clip r = π_θ/π_old, π_old = π_prox; `tis_mode` may reweight π_behav → π_old.
decoupled: AReaL's decoupled PPO (Hilton et al. 2021, Fu et al. 2025): clip r = π_θ/π_prox
           and multiply each token's loss by w_t = π_prox/π_behav; a token with
           w_t > behav_weight_cap gets weight 0 but stays in the loss's denominator. The
           trust region is centred on the recent policy, while w_t makes the stale samples
           an unbiased estimate: with K versions of lag, this is what keeps training near
           the synchronous curve.
bypass:    π_behav is the proximal: clip r = π_θ/π_behav, no w, and no old-log-prob forward.
           Cheaper, but the clip range is spent on staleness and engine/trainer mismatch
           before the update moves at all (a token K versions old may start clipped, so its
           gradient is lost), and the mismatch is never corrected, only bounded.

Rejection masks (`algorithm.rollout_mask`, verl's rollout_rs) drop samples where
ρ = π_old/π_behav strays outside [low, high] (low 0 = 1/high); dropped tokens leave the
loss's denominator:

token:     IcePop (Ring-1T): drop token t if ρ_t ∉ [low, high].
geometric: drop sequence i if exp(mean_t log ρ_t) ∉ [low, high] (length-neutral, so long
           answers are not rejected for length alone; thresholds ~1.001).

Combine the token mask with `tis_mode: token` and `tis_cap ≥ high` for IcePop's exact
objective (the kept tokens weighted by their ρ).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from agentrl.algorithms.deferred import metric
from agentrl.algorithms.losses import Metrics, PolicyLossFn
from agentrl.algorithms.masked import masked_max, masked_mean
from agentrl.config.schema import AlgorithmConfig

OffPolicyMode = Literal["standard", "decoupled", "bypass"]
RolloutMask = Literal["none", "token", "geometric"]
LOG_RATIO_CLAMP = 20.0


@torch.no_grad()
def behaviour_weights(
    prox_log_probs: Tensor, behav_log_probs: Tensor, mask: Tensor, cap: float
) -> tuple[Tensor, Metrics]:
    """Decoupled PPO's per-token weights `[B, T]`: w = π_prox/π_behav (log-ratio clamped to
    ±20), 0 where w > `cap` (cap ≤ 0: no cap) and off the mask; detached. Metrics:
    `behav_weight_mean`/`_max` over the kept tokens, `behav_masked_frac` (share of trained
    tokens over the cap), `behav_kl` (k3 estimate of KL(π_behav‖π_prox))."""
    m = mask.to(prox_log_probs.dtype)
    log_w = (prox_log_probs - behav_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    w = log_w.exp()
    over = w > cap if cap > 0 else torch.zeros_like(m, dtype=torch.bool)
    kept = m * (~over).to(m.dtype)
    weights = w * kept
    metrics: Metrics = {
        "offpolicy/behav_weight_mean": metric(masked_mean(w, kept)),
        "offpolicy/behav_weight_max": metric(masked_max(w, kept)),
        "offpolicy/behav_masked_frac": metric(masked_mean(over.to(m.dtype), m)),
        "offpolicy/behav_kl": metric(masked_mean(w - 1 - log_w, m)),
    }
    return weights, metrics


def decoupled_loss(
    loss_fn: PolicyLossFn,
    log_probs: Tensor,
    prox_log_probs: Tensor,
    behav_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """`loss_fn` (any ratio loss: ppo_clip, gspo, cispo, …) clipping π_θ/π_prox, each token's
    loss times `behaviour_weights(prox, behav, mask, cfg.behav_weight_cap)` (and `is_weights`
    if given). Tokens over the cap keep their place in the aggregation's denominator, as
    AReaL's loss does."""
    w, metrics = behaviour_weights(prox_log_probs, behav_log_probs, mask, cfg.behav_weight_cap)
    if is_weights is not None:
        w = w * is_weights.detach()
    loss, loss_metrics = loss_fn(log_probs, prox_log_probs, advantages, mask, cfg, is_weights=w)
    return loss, loss_metrics | metrics


def off_policy_loss(
    loss_fn: PolicyLossFn,
    log_probs: Tensor,
    old_log_probs: Tensor | None,
    rollout_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """The policy loss under `cfg.off_policy`. `old_log_probs` None: the trainer skipped the
    old-log-prob forward because the update is one on-policy pass, so π_prox is exactly the
    update's own log-probs, detached (decoupled then costs no forward either)."""
    if cfg.off_policy == "bypass":
        return loss_fn(log_probs, rollout_log_probs, advantages, mask, cfg, is_weights=is_weights)
    prox = old_log_probs if old_log_probs is not None else log_probs.detach()
    if cfg.off_policy == "decoupled":
        return decoupled_loss(
            loss_fn, log_probs, prox, rollout_log_probs, advantages, mask, cfg,
            is_weights=is_weights,
        )  # fmt: skip
    if cfg.off_policy != "standard":
        raise ValueError(f"unknown algorithm.off_policy {cfg.off_policy!r}")
    return loss_fn(log_probs, prox, advantages, mask, cfg, is_weights=is_weights)


def mask_band(low: float, high: float) -> tuple[float, float]:
    """[low, high] of a rejection mask: low 0 means 1/high."""
    if high <= 1 or not 0 <= low < 1:
        raise ValueError(
            f"rollout mask band [{low}, {high}] must hold 1: need 0 <= low < 1 < high "
            "(low 0 = 1/high)"
        )
    return (low if low > 0 else 1.0 / high), high


@torch.no_grad()
def rollout_rejection(
    old_log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    mode: RolloutMask,
    low: float,
    high: float,
) -> tuple[Tensor, Metrics]:
    """The kept tokens `[B, T]` (1 kept, 0 rejected or untrained) of the rejection mask
    `mode` on ρ = π_old/π_rollout, and metrics: `mask_token_frac` (trained tokens rejected),
    `mask_seq_frac` (rows with a rejected token, among rows with trained tokens); the
    geometric mode adds `geo_ratio_mean`/`_min`/`_max` over rows."""
    m = mask.to(old_log_probs.dtype)
    if mode == "none":
        return m, {}
    lo, hi = mask_band(low, high)
    log_rho = ((old_log_probs - rollout_log_probs) * m).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    rows = m.sum(dim=-1) > 0
    metrics: Metrics = {}
    if mode == "token":
        rho = log_rho.exp()
        keep = m * ((rho >= lo) & (rho <= hi)).to(m.dtype)
    elif mode == "geometric":
        geo = (log_rho.sum(dim=-1) / m.sum(dim=-1).clamp(min=1)).exp()
        keep = m * ((geo >= lo) & (geo <= hi)).to(m.dtype)[:, None]
        r = rows.to(m.dtype)
        metrics["offpolicy/geo_ratio_mean"] = metric(masked_mean(geo, r))
        metrics["offpolicy/geo_ratio_max"] = metric(masked_max(geo, r))
        metrics["offpolicy/geo_ratio_min"] = metric(-masked_max(-geo, r))
    else:
        raise ValueError(f"unknown algorithm.rollout_mask {mode!r}")
    rejected_rows = ((m - keep).sum(dim=-1) > 0).to(m.dtype)
    metrics["offpolicy/mask_token_frac"] = metric(masked_mean(1 - keep, m))
    metrics["offpolicy/mask_seq_frac"] = metric(masked_mean(rejected_rows, rows.to(m.dtype)))
    return keep, metrics
