"""Fixtures: a seeded generator and a random multi-turn batch (see algo_batches)."""

from __future__ import annotations

import pytest
import torch
from algo_batches import make_mask, make_rewards


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


@pytest.fixture
def batch(gen):
    """8 rows of length 16 in 4 groups of 2 (row 1 fully masked)."""
    mask = make_mask(8, 16, gen)
    return {
        "mask": mask,
        "rewards": make_rewards(mask, gen),
        "group_index": torch.tensor([7, 7, 3, 3, 5, 5, 9, 9]),
    }
