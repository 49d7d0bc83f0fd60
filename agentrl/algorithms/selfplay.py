"""Self-play fine-tuning losses on sequence log-probs: SPIN and SPPO.

Both compare the policy π_θ with the previous iterate π_prev (a frozen copy, like DPO's
reference) through the sequence log-ratio h(y) = log π_θ(y|x) − log π_prev(y|x). Inputs are
`[B]` sequence log-probs (see `sequence_log_probs`); the recipes own sampling and iteration.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def sequence_log_probs(token_log_probs: Tensor, mask: Tensor) -> Tensor:
    """log π(y|x) = Σ_t m_t·log π(y_t|x, y_<t) over trained tokens, `[B]`."""
    return (token_log_probs * mask.to(token_log_probs.dtype)).sum(dim=-1)


def spin_loss(
    policy_real_logps: Tensor,
    prev_real_logps: Tensor,
    policy_gen_logps: Tensor,
    prev_gen_logps: Tensor,
    beta: float,
) -> tuple[Tensor, dict[str, float]]:
    """SPIN (Chen et al. 2024): a DPO-style logistic loss where the "chosen" response is the
    demonstration y and the "rejected" one is the previous iterate's own sample y'.

    L = mean ℓ(β·[h(y) − h(y')]),  ℓ(t) = log(1 + e^(−t)) = −log σ(t).
    The fixed point is π_θ = p_data: then no β-margin separates real from generated.
    """
    margin = (policy_real_logps - prev_real_logps) - (policy_gen_logps - prev_gen_logps)
    loss = -F.logsigmoid(beta * margin).mean()
    with torch.no_grad():
        metrics = {
            "spin_margin": margin.mean().item(),
            "spin_accuracy": (margin > 0).float().mean().item(),
        }
    return loss, metrics


def sppo_loss(
    policy_logps: Tensor, prev_logps: Tensor, win_probs: Tensor, eta: float
) -> tuple[Tensor, dict[str, float]]:
    """SPPO (Wu et al. 2024): regress the log-ratio onto the centred win probability.

    L = mean (h(y) − η·(P(y ≻ π_prev | x) − ½))², `win_probs` = P(y ≻ π_prev | x) ∈ [0, 1]
    (estimated by a preference model against the previous iterate's samples). Responses that
    beat π_prev more than half the time gain probability, the rest lose it.
    """
    log_ratio = policy_logps - prev_logps
    target = eta * (win_probs.to(log_ratio.dtype) - 0.5)
    loss = (log_ratio - target).square().mean()
    with torch.no_grad():
        metrics = {
            "sppo_log_ratio": log_ratio.mean().item(),
            "sppo_target": target.mean().item(),
        }
    return loss, metrics
