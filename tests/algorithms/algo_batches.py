"""Random multi-turn batches: trained spans separated by tool-token holes, padding, and
fully masked rows. Shared by conftest fixtures and tests that need other shapes."""

from __future__ import annotations

import torch


def make_mask(batch: int, length: int, gen: torch.Generator, empty_rows=(1,)) -> torch.Tensor:
    """Each row: up to 3 trained spans with untrained gaps (tool output) and tail padding."""
    mask = torch.zeros(batch, length)
    for i in range(batch):
        if i in empty_rows:
            continue
        t = int(torch.randint(0, 3, (1,), generator=gen))
        for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
            span = int(torch.randint(1, 5, (1,), generator=gen))
            mask[i, t : t + span] = 1.0
            t += span + int(torch.randint(1, 4, (1,), generator=gen))
            if t >= length:
                break
    return mask


def make_rewards(mask: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A reward on the last token of each trained span, plus a stray one on an untrained token."""
    rewards = torch.zeros_like(mask)
    padded = torch.nn.functional.pad(mask, (0, 1))
    ends = (padded[:, :-1] > 0) & (padded[:, 1:] == 0)
    rewards[ends] = torch.randn(int(ends.sum()), generator=gen)
    for i in range(mask.shape[0]):
        holes = (mask[i] == 0).nonzero().flatten()
        if len(holes):
            rewards[i, holes[-1]] += 0.5
    return rewards
