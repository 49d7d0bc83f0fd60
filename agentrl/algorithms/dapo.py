"""DAPO batch shaping: dynamic sampling filter and soft overlong punishment.

Dynamic sampling (`algorithm.dynamic_sampling`): a group whose samples all scored the same has
zero group-relative advantage everywhere, so it only dilutes the batch; DAPO drops such groups
and samples more prompts. Overlong shaping (`algorithm.overlong_buffer`,
`algorithm.overlong_penalty`) penalises responses approaching the length limit smoothly instead
of scoring truncated answers as plain failures.
"""

from __future__ import annotations

import torch
from torch import Tensor


def filter_groups_by_reward_variance(
    rewards: Tensor, group_index: Tensor | None = None, *, tol: float = 1e-6
) -> Tensor:
    """Keep mask of groups whose rewards are not all equal (max − min > tol).

    Either `rewards` is `[G, n]` (one row per group) and the mask is `[G]`, or `rewards` is
    `[B]` with `group_index` `[B]` and the mask is per sample `[B]` (whole groups kept or not).
    """
    if group_index is None:
        if rewards.dim() != 2:
            raise ValueError("rewards must be [G, n] when group_index is not given")
        return (rewards.amax(dim=1) - rewards.amin(dim=1)) > tol
    _, inverse = torch.unique(group_index, return_inverse=True)
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    hi = rewards.new_full((n_groups,), -torch.inf).scatter_reduce(0, inverse, rewards, "amax")
    lo = rewards.new_full((n_groups,), torch.inf).scatter_reduce(0, inverse, rewards, "amin")
    return ((hi - lo) > tol)[inverse]


def overlong_penalty(response_lengths: Tensor, max_len: int, buffer: int, penalty: float) -> Tensor:
    """Reward shaping `[B]` (≤ 0) added to the score of each response.

    With L the response length, L_max = max_len and L_c = buffer:
      0                                 if L ≤ L_max − L_c
      −penalty·(L − (L_max − L_c))/L_c  if L_max − L_c < L ≤ L_max
      −penalty                          if L > L_max
    buffer ≤ 0 disables shaping (all zeros).
    """
    lengths = response_lengths.to(torch.float32)
    if buffer <= 0:
        return torch.zeros_like(lengths)
    excess = (lengths - (max_len - buffer)).clamp(min=0.0, max=float(buffer))
    return -penalty * excess / buffer
