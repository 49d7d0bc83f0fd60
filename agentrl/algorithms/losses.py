"""Policy-gradient losses (selected by `algorithm.policy_loss`), loss aggregation, value loss
and entropy.

A policy loss maps per-token log-probs under the current policy, the behaviour (old) policy's
log-probs and advantages to a scalar loss plus float metrics. `is_weights` are detached
rollout/train mismatch weights (see `correction.importance_weights`) multiplied into the
per-token loss. Log-ratios are clamped to ±20 before `exp` so one bad token cannot overflow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from agentrl.algorithms._registry import lookup, registrar
from agentrl.algorithms.deferred import metric
from agentrl.algorithms.masked import masked_max, masked_mean
from agentrl.config.schema import AlgorithmConfig

AggMode = Literal[
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]
# Modes whose value over a batch is the plain sum of its parts' values (no batch-dependent
# denominator): a trainer splitting the batch adds micro-batch losses with weight 1.
ADDITIVE_AGG_MODES: frozenset[str] = frozenset({"token-sum"})
Metrics = dict[str, float | Tensor]  # tensors inside `deferred_metrics()`
PolicyLossFn = Callable[..., tuple[Tensor, Metrics]]
POLICY_LOSSES: dict[str, PolicyLossFn] = {}
register_policy_loss = registrar(POLICY_LOSSES, "policy loss")
# Losses that aggregate their own way whatever `algorithm.loss_agg_mode` says (the mode they
# use is what a trainer must weight micro-batches by); a plugin loss adds itself here.
FIXED_AGG_MODES: dict[str, AggMode] = {
    "gspo": "seq-mean-token-mean",
    "sapo": "seq-mean-token-mean",
    "geo_mean": "seq-mean-token-mean",
}
LOG_RATIO_CLAMP = 20.0


def get_policy_loss(name: str) -> PolicyLossFn:
    """The loss registered as `name`; KeyError listing the known names otherwise."""
    return lookup(POLICY_LOSSES, name, "policy loss")


def policy_agg_mode(cfg: AlgorithmConfig) -> AggMode:
    """The aggregation `cfg.policy_loss` actually uses (FIXED_AGG_MODES, else loss_agg_mode)."""
    return FIXED_AGG_MODES.get(cfg.policy_loss, cfg.loss_agg_mode)


def aggregate_loss(loss_mat: Tensor, mask: Tensor, mode: AggMode, scale: float = 0.0) -> Tensor:
    """Reduce a `[B, T]` per-token loss to a scalar.

    token-mean:              Σ_{i,t} l·m / Σ_{i,t} m  (long answers weigh more; DAPO)
    token-sum:               Σ_{i,t} l·m              (no normalisation at all)
    seq-mean-token-sum:      mean_i Σ_t l·m           (no length normalisation)
    seq-mean-token-mean:     mean_i (Σ_t l·m / Σ_t m) (each sequence weighs equally; GRPO paper)
    seq-mean-token-sum-norm: mean_i Σ_t l·m / L       (Dr.GRPO: L a constant budget, `scale`;
                                                       0 = T, the tensor's width, as verl)
    Rows with no trained token are excluded from the sequence means; an empty batch gives 0.
    """
    mask = mask.to(loss_mat.dtype)
    if mode == "token-mean":
        return masked_mean(loss_mat, mask)
    if mode == "token-sum":
        return (loss_mat * mask).sum()
    rows = (mask.sum(dim=-1) > 0).to(loss_mat.dtype)
    if mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        per_seq = (loss_mat * mask).sum(dim=-1)
    elif mode == "seq-mean-token-mean":
        per_seq = masked_mean(loss_mat, mask, dim=-1)
    else:
        raise ValueError(f"unknown loss_agg_mode {mode!r}")
    out = masked_mean(per_seq, rows)
    if mode == "seq-mean-token-sum-norm":
        out = out / (scale if scale > 0 else max(mask.shape[-1], 1))
    return out


def agg(
    loss_mat: Tensor, mask: Tensor, cfg: AlgorithmConfig, mode: AggMode | None = None
) -> Tensor:
    """`aggregate_loss` under `cfg` (its mode unless `mode` is given, its loss_scale_factor)."""
    return aggregate_loss(loss_mat, mask, mode or cfg.loss_agg_mode, cfg.loss_scale_factor)


def _log_ratio(log_probs: Tensor, old_log_probs: Tensor) -> Tensor:
    return (log_probs - old_log_probs).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _weighted(loss_mat: Tensor, is_weights: Tensor | None) -> Tensor:
    return loss_mat if is_weights is None else loss_mat * is_weights.detach()


@torch.no_grad()
def _ratio_metrics(log_ratio: Tensor, mask: Tensor) -> Metrics:
    """approx_kl is k3 of KL(π_old‖π): E_old[(r − 1) − log r] ≥ 0, r = π/π_old."""
    ratio = log_ratio.exp()
    return {
        "approx_kl": metric(masked_mean(ratio - 1 - log_ratio, mask)),
        "ratio_mean": metric(masked_mean(ratio, mask)),
        "ratio_max": metric(masked_max(ratio, mask)),
    }


def _clip_surrogate(
    advantages: Tensor, ratio: Tensor, cfg: AlgorithmConfig
) -> tuple[Tensor, Tensor]:
    """PPO's pessimistic bound max(−A·r, −A·clip(r, 1 − clip_low, 1 + clip_high)) per token,
    and where the clipped term won (what `clip_frac` counts). Shared by PPO and GSPO, which
    differ only in which ratio they clip."""
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _loss_and_metrics(
    loss_mat: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    mode: AggMode,
    is_weights: Tensor | None,
    log_ratio: Tensor,
    clip_hit: Tensor,
) -> tuple[Tensor, Metrics]:
    """The common tail of the ratio losses: IS-weight, aggregate, and the ratio metrics plus
    `clip_frac` (the share of trained tokens where clipping took effect)."""
    loss = agg(_weighted(loss_mat, is_weights), mask, cfg, mode)
    metrics = _ratio_metrics(log_ratio.detach(), mask)
    metrics["clip_frac"] = metric(masked_mean(clip_hit.float(), mask))
    return loss, metrics


@register_policy_loss("ppo_clip")
def ppo_clip_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """PPO clipped surrogate with asymmetric clip (DAPO clip-higher) and optional dual clip.

    l = max(−A·r, −A·clip(r, 1 − clip_low, 1 + clip_high)), r = exp(log π − log π_old).
    A larger clip_high lets low-probability tokens gain mass, countering entropy collapse.
    Dual clip (dual_clip_c = c > 1): for A < 0, l = min(l, −c·A), bounding the loss when a
    negative-advantage token's ratio has exploded.
    """
    c = cfg.dual_clip_c
    if 0 < c <= 1:
        raise ValueError(f"dual_clip_c must be > 1 (or 0 to disable), got {c}")
    log_ratio = _log_ratio(log_probs, old_log_probs)
    loss_mat, clip_hit = _clip_surrogate(advantages, log_ratio.exp(), cfg)
    dual_hit = torch.zeros_like(mask, dtype=torch.bool)
    if c > 0:
        dual_bound = -advantages * c
        dual_hit = (advantages < 0) & (loss_mat > dual_bound)
        loss_mat = torch.where(advantages < 0, torch.minimum(loss_mat, dual_bound), loss_mat)
    loss, metrics = _loss_and_metrics(
        loss_mat, mask, cfg, cfg.loss_agg_mode, is_weights, log_ratio, clip_hit
    )
    metrics["dual_clip_frac"] = metric(masked_mean(dual_hit.float(), mask))
    return loss, metrics


@register_policy_loss("gspo")
def gspo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """GSPO: clip a sequence-level ratio instead of token ratios.

    s_i = exp(mean_t∈mask (log π − log π_old)) (geometric mean of token ratios). Per token
    (GSPO-token form) s_{i,t} = sg[s_i]·π(y_t)/sg[π(y_t)], equal to s_i in value and giving
    s_i-weighted token gradients, so per-token advantages (turn credit) still apply.
    l = max(−A·s_{i,t}, −A·clip(s_{i,t}, 1 − clip_low, 1 + clip_high)), aggregated with
    seq-mean-token-mean whatever `loss_agg_mode` says (the paper's length normalisation).
    The paper's clip ranges are ~3e-4 / 4e-4, far below PPO's 0.2.
    """
    log_ratio = _log_ratio(log_probs, old_log_probs)
    seq_log_ratio = masked_mean(log_ratio, mask, dim=-1).unsqueeze(-1)
    token_log_ratio = log_probs - log_probs.detach() + seq_log_ratio.detach()
    seq_ratio = token_log_ratio.clamp(max=10.0).exp()
    loss_mat, clip_hit = _clip_surrogate(advantages, seq_ratio, cfg)
    loss, metrics = _loss_and_metrics(
        loss_mat, mask, cfg, FIXED_AGG_MODES["gspo"], is_weights, log_ratio, clip_hit
    )
    rows = (mask.sum(dim=-1) > 0).float()
    metrics["seq_ratio_mean"] = metric(masked_mean(seq_log_ratio.squeeze(-1).exp(), rows))
    return loss, metrics


@register_policy_loss("cispo")
def cispo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    cfg: AlgorithmConfig,
    *,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Metrics]:
    """CISPO (MiniMax-M1): clip the IS weight, not the update, so no token loses its gradient.

    l = −sg[clip(r, 1 − clip_low, 1 + clip_high)]·A·log π. The paper uses no lower bound
    (set clip_low ≥ 1) and a large clip_high.
    """
    log_ratio = _log_ratio(log_probs, old_log_probs)
    ratio = log_ratio.exp()
    weight = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high).detach()
    loss_mat = -advantages * weight * log_probs
    clip_hit = weight != ratio.detach()
    return _loss_and_metrics(
        loss_mat, mask, cfg, cfg.loss_agg_mode, is_weights, log_ratio, clip_hit
    )


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip: float,
    mode: AggMode = "token-mean",
) -> tuple[Tensor, dict[str, float]]:
    """Clipped critic loss: ½·max((V − R)², (V_old + clip(V − V_old, ±clip) − R)²).

    Clipping keeps the critic near the values the advantages were computed with; clip ≤ 0
    gives the plain squared error.
    """
    unclipped = (values - returns) ** 2
    if clip > 0:
        v_clipped = old_values + (values - old_values).clamp(-clip, clip)
        clipped = (v_clipped - returns) ** 2
    else:
        clipped = unclipped
    loss = 0.5 * aggregate_loss(torch.maximum(unclipped, clipped), mask, mode)
    with torch.no_grad():
        metrics: dict[str, float] = {
            "vf_clip_frac": masked_mean((clipped > unclipped).float(), mask).item(),
            "vpred_mean": masked_mean(values, mask).item(),
        }
    return loss, metrics


def entropy_from_logits(logits: Tensor) -> Tensor:
    """H = logsumexp(z) − Σ softmax(z)·z over the last dim (one softmax, no log of zeros)."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)
