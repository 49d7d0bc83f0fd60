"""The optimal token baseline (`algorithm.adv_estimator: optimal_token_baseline`).

Why: a group-mean baseline is one number per prompt, but the variance of the policy-gradient
term of token t grows with how much "score-function energy" the path has accumulated up to t.
The variance-minimising constant baseline at step t weights each sample's return by that
energy: B_t = Σ_i G_{i,t} W_{i,t} / Σ_i W_{i,t}, with W_{i,t} = Σ_{j≤t} ‖∇ log π(y_j)‖² and the
logit-space proxy ‖∇_z log π(y_j)‖² = 1 − 2π(y_j) + Σ_v π(v)² (exact for the softmax layer).
With rollout correction on, w_j is scaled by ρ̄_j² (the IS weight enters the gradient twice).

Positions are aligned by trained-token index, so tool tokens between turns neither add energy
nor shift one sample's step t against another's (verl's multi-turn variant does the same; its
single-turn one aligns raw columns, which agrees on right-padded single-turn rows).
"""

from __future__ import annotations

import torch
from torch import Tensor

from agentrl.algorithms.advantages import AdvantageInput, group_stats, register_adv_estimator
from agentrl.algorithms.returns import discounted_returns
from agentrl.config.schema import AlgorithmConfig

OTB_EPS = 1e-8


def _compact(x: Tensor, mask: Tensor, width: int) -> Tensor:
    """Row-wise: the values at trained positions, left-aligned into `[B, width]` (0 beyond)."""
    m = mask.bool()
    col = (m.long().cumsum(dim=1) - 1).clamp(min=0)
    out = x.new_zeros(x.shape[0], width + 1)
    idx = torch.where(m, col, torch.full_like(col, width))  # untrained → a spill column
    return out.scatter_(1, idx, torch.where(m, x, torch.zeros_like(x)))[:, :width]


def _expand(x: Tensor, mask: Tensor) -> Tensor:
    """Inverse of `_compact`: the k-th value of a row goes to its k-th trained position."""
    m = mask.bool()
    col = (m.long().cumsum(dim=1) - 1).clamp(min=0, max=max(x.shape[1] - 1, 0))
    if x.shape[1] == 0:
        return torch.zeros(mask.shape, dtype=x.dtype, device=x.device)
    return x.gather(1, col) * m


def _zero_tails(baseline: Tensor, lengths: Tensor, inverse: Tensor) -> Tensor:
    """Per group: if one sample is strictly the longest, zero its baseline from the second
    longest length on (no other sample informs those steps, so B_t would be its own G_t)."""
    baseline = baseline.clone()
    for g in inverse.unique().tolist():
        rows = (inverse == g).nonzero().flatten()
        rows = rows[lengths[rows] > 0]
        if rows.numel() < 2:
            continue
        ls = lengths[rows]
        top2 = ls.topk(2).values
        if int((ls == top2[0]).sum()) == 1 and top2[0] > top2[1]:
            baseline[rows[ls.argmax()], int(top2[1]) :] = 0.0
    return baseline


@register_adv_estimator("optimal_token_baseline", sum_pi_squared=True, group_relative=True)
def optimal_token_baseline_advantages(
    inp: AdvantageInput, cfg: AlgorithmConfig
) -> tuple[Tensor, Tensor]:
    """A_{i,t} = G_{i,t} − B_{g,t}, B_{g,t} = Σ_{j∈g} G_{j,t} W_{j,t} / (Σ_{j∈g} W_{j,t} + 1e-8).

    G is the token return-to-go (γ = `algorithm.gamma`, 1 in verl), W the cumulative
    1 − 2π_old(y) + Σπ_old² (× is_weights² under rollout correction). Needs `old_log_probs`
    and `sum_pi_squared` (the trainer provides them: its entry says `sum_pi_squared`).
    `algorithm.otb_zero_tail` zeroes B past the second-longest response of a group.
    """
    if inp.old_log_probs is None or inp.sum_pi_squared is None:
        raise ValueError(
            "advantage estimator 'optimal_token_baseline' needs AdvantageInput.old_log_probs "
            "and .sum_pi_squared (the trainer fills them for `sum_pi_squared` estimators)"
        )
    mask = inp.mask.to(inp.token_rewards.dtype)
    returns = discounted_returns(inp.token_rewards, mask, cfg.gamma)
    w = 1 - 2 * inp.old_log_probs.exp() + inp.sum_pi_squared
    if inp.is_weights is not None:
        w = w * inp.is_weights.detach() ** 2
    lengths = mask.sum(dim=1).long()
    width = int(lengths.max().item()) if lengths.numel() else 0
    big_w = _compact(w * mask, mask, width).cumsum(dim=1)
    big_g = _compact(returns, mask, width)
    valid = (torch.arange(width, device=mask.device)[None, :] < lengths[:, None]).to(mask.dtype)
    stats = group_stats(inp.token_rewards.sum(-1), inp.group_index, "optimal_token_baseline")
    inverse = stats.inverse
    n_groups = int(inverse.max().item()) + 1
    idx = inverse[:, None].expand(-1, width)
    num = big_w.new_zeros(n_groups, width).scatter_add_(0, idx, big_g * big_w * valid)
    den = big_w.new_zeros(n_groups, width).scatter_add_(0, idx, big_w * valid)
    baseline = (num / (den + OTB_EPS))[inverse]
    if cfg.otb_zero_tail:
        baseline = _zero_tails(baseline, lengths, inverse)
    adv = _expand((big_g - baseline) * valid, mask)
    return adv, returns
