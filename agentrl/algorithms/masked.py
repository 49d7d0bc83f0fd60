"""Masked reductions over `[B, T]` response tensors.

Every statistic in this package is taken over trained tokens only (`mask == 1`); env and tool
tokens sit between trained spans in multi-turn episodes and must not leak into means, variances
or recursions. Empty selections return 0 rather than NaN so an all-masked batch is harmless.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ x·m over `dim` (all elements when `dim` is None)."""
    prod = x * mask
    return prod.sum() if dim is None else prod.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ x·m / Σ m, with 0 where Σ m = 0."""
    mask = mask.to(x.dtype)
    total = masked_sum(x, mask, dim)
    count = mask.sum() if dim is None else mask.sum(dim)
    return total / count.clamp(min=1.0)


def masked_var(x: Tensor, mask: Tensor) -> Tensor:
    """Population variance of the masked elements: Σ m(x − μ)² / Σ m (0 when empty)."""
    mean = masked_mean(x, mask)
    return masked_mean((x - mean) ** 2, mask)


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x − μ) / √(σ² + eps) with μ, σ² over the masked elements; untrained positions → 0.

    Population variance (divide by N) so a single trained token is well defined.
    """
    mask = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """max of the masked elements (0 when none)."""
    mask = mask.bool()
    if not mask.any():
        return x.new_zeros(())
    return x[mask].max()
