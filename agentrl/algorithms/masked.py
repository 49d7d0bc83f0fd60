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


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = False) -> Tensor:
    """Variance of the masked elements: Σ m(x − μ)² / (Σ m − 1 if unbiased else Σ m).

    0 when empty, and (unbiased) when a single element is selected, where ÷(N − 1) is undefined.
    """
    mask = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    total = masked_sum((x - mean) ** 2, mask)
    n = mask.sum()
    denom = n - 1 if unbiased else n
    return torch.where(denom > 0, total / denom.clamp(min=1.0), torch.zeros_like(total))


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x − μ) / √(σ² + eps) with μ, σ² over the masked elements; untrained positions → 0.

    Unbiased variance (÷(N − 1)), as verl's `masked_whiten`, so estimators that share a name
    with verl's whiten identically; a single trained token whitens to 0.
    """
    mask = mask.to(x.dtype)
    mean = masked_mean(x, mask)
    var = masked_var(x, mask, unbiased=True)
    return (x - mean) * torch.rsqrt(var + eps) * mask


def masked_max(x: Tensor, mask: Tensor) -> Tensor:
    """max of the masked elements (0 when none). No host sync for floating `x` (a boolean
    selection would wait for the device to count the elements)."""
    mask = mask.bool()
    if x.is_floating_point() and x.numel():
        top = x.masked_fill(~mask, float("-inf")).amax()
        return torch.where(mask.any(), top, torch.zeros_like(top))
    if not mask.any():
        return x.new_zeros(())
    return x[mask].max()
