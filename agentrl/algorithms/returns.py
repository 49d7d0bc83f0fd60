"""Reward placement and return recursions that skip env/tool tokens.

In a multi-turn episode the response tensor interleaves trained spans (model turns) with
untrained spans (tool results, observations). A recursion over raw time steps would treat the
tool tokens as actions with zero value, breaking γ/λ discounting and GAE bootstrapping. Every
recursion here instead walks the trained tokens only: position t's successor is the next
position with `mask == 1`, so a row with holes gives exactly what its compacted row would.
"""

from __future__ import annotations

import torch
from torch import Tensor


def fold_rewards(token_rewards: Tensor, mask: Tensor) -> Tensor:
    """Move rewards sitting on untrained tokens onto the preceding trained token.

    An env reward observed after a tool call belongs to the action that caused it, so a reward
    on an observation token is credited to the last trained token before it. Rewards before a
    row's first trained token have no action to credit and are dropped.
    """
    m = mask.bool()
    steps = torch.arange(m.shape[1], device=m.device).expand_as(m)
    last_trained = torch.where(m, steps, torch.full_like(steps, -1)).cummax(dim=1).values
    stray = token_rewards * (~m & (last_trained >= 0))
    folded = token_rewards * m
    return folded.scatter_add(1, last_trained.clamp(min=0), stray)


def turn_ids_from_mask(mask: Tensor) -> Tensor:
    """Turn id per token: each maximal run of trained tokens is one turn; −1 off the mask."""
    m = mask.bool()
    prev = torch.nn.functional.pad(m[:, :-1], (1, 0), value=False)
    starts = (m & ~prev).long()
    return torch.where(m, starts.cumsum(dim=1) - 1, torch.full_like(starts, -1))


def turn_returns(token_rewards: Tensor, mask: Tensor, turn_index: Tensor, gamma: float) -> Tensor:
    """Per-token return-to-go over turns: G_k = Σ_{j≥k} γ^(j−k) R_j, R_j = Σ rewards in turn j.

    Every trained token of turn k receives G_k; untrained positions get 0. Rewards are folded
    onto trained tokens first, so a reward placed on a turn's trailing observation counts for
    that turn.
    """
    rewards = fold_rewards(token_rewards, mask)
    m = mask.bool() & (turn_index >= 0)
    n_turns = int(turn_index.max().item()) + 1 if m.any() else 1
    idx = torch.where(m, turn_index, torch.zeros_like(turn_index)).long()
    per_turn = rewards.new_zeros(rewards.shape[0], n_turns)
    per_turn.scatter_add_(1, idx, rewards * m)
    running = per_turn.new_zeros(per_turn.shape[0])
    togo = torch.empty_like(per_turn)
    for k in reversed(range(n_turns)):
        running = per_turn[:, k] + gamma * running
        togo[:, k] = running
    return togo.gather(1, idx) * m


def discounted_returns(token_rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """Token-level return-to-go over trained tokens: G_t = r_t + γ·G_next(t) (0 off the mask).

    next(t) is the next trained position, so tool tokens neither discount nor reset the sum.
    """
    rewards = fold_rewards(token_rewards, mask)
    m = mask.bool()
    running = rewards.new_zeros(rewards.shape[0])
    out = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[1])):
        running = torch.where(m[:, t], rewards[:, t] + gamma * running, running)
        out[:, t] = running
    return out * m


def gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over trained tokens; returns (advantages, returns).

    δ_t = r_t + γ·V_next(t) − V_t,  A_t = δ_t + γλ·A_next(t),  returns_t = A_t + V_t,
    with next(t) the next trained position and V = A = 0 past the last one (episode end).
    """
    rewards = fold_rewards(token_rewards, mask)
    m = mask.bool()
    next_value = values.new_zeros(values.shape[0])
    next_adv = values.new_zeros(values.shape[0])
    adv = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        next_adv = torch.where(m[:, t], a_t, next_adv)
        next_value = torch.where(m[:, t], values[:, t], next_value)
        adv[:, t] = a_t
    adv = adv * m
    return adv, (adv + values) * m
