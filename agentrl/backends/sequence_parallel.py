"""Ulysses sequence parallelism: split one packed sequence over a group of ranks.

Why: a long multi-turn episode's activations can exceed one GPU's memory even at micro-batch
size 1. With `trainer.ulysses_sp = P`, the P ranks of a sequence-parallel group train on the
same rows; each holds 1/P of the packed row through every layer. Around attention an
all-to-all trades the sequence slice for a slice of the heads (`gather_sequence`), attention
runs over whole sequences for H/P heads, and the inverse all-to-all (`scatter_sequence`)
brings the sequence slice back (DeepSpeed-Ulysses, as verl uses it).

The loss is computed identically on every rank of the group from the per-token log-probs of
the whole row (`gather_tokens`: all-gather forward, local slice backward), so any loss mode
(including sequence-level ratios) works unchanged. Each rank's parameter gradients then hold
the contribution of its own slice; FSDP's reduction over all ranks sums the slices.

Requirements: heads and kv heads divisible by P (kv heads are repeated up to the query heads
otherwise), and the packed row padded to a multiple of P (the packer adds a dummy segment).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def new_sp_group(size: int) -> Any:
    """This rank's group of `size` consecutive ranks (collective: every rank calls it)."""
    world, rank = dist.get_world_size(), dist.get_rank()
    if size < 1 or world % size:
        raise ValueError(f"trainer.ulysses_sp={size} must divide the world size {world}")
    mine = None
    for start in range(0, world, size):
        group = dist.new_group(list(range(start, start + size)))
        if start <= rank < start + size:
            mine = group
    return mine


def _all_to_all(x: torch.Tensor, group: Any) -> torch.Tensor:
    """Chunk j of dim 0 goes to rank j; chunk j of the result came from rank j."""
    x = x.contiguous()  # before empty_like, which would copy a permuted view's strides
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x, group=group)
    return out


def _heads_to_sequence(x: torch.Tensor, group: Any) -> torch.Tensor:
    p = dist.get_world_size(group)
    h, n, d = x.shape
    if h % p:
        raise ValueError(f"Ulysses needs heads ({h}) divisible by ulysses_sp ({p})")
    y = _all_to_all(x.reshape(p, h // p, n, d), group)  # [p, h/p, n, d]: rank j's slice j
    return y.permute(1, 0, 2, 3).reshape(h // p, p * n, d)


def _sequence_to_heads(y: torch.Tensor, group: Any) -> torch.Tensor:
    p = dist.get_world_size(group)
    hp, total, d = y.shape
    x = y.reshape(hp, p, total // p, d).permute(1, 0, 2, 3)  # [p, h/p, n, d]
    return _all_to_all(x, group).reshape(p * hp, total // p, d)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return _heads_to_sequence(x, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return _sequence_to_heads(grad, ctx.group), None


class _Scatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: torch.Tensor, group: Any) -> torch.Tensor:  # type: ignore[override]
        ctx.group = group
        return _sequence_to_heads(y, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return _heads_to_sequence(grad, ctx.group), None


def gather_sequence(x: torch.Tensor, group: Any, heads: int | None = None) -> torch.Tensor:
    """`[H, n, D]` (all heads, my sequence slice) → `[H/P, P·n, D]` (my heads, whole row).
    kv tensors with fewer heads than P are repeated up to `heads` first."""
    p = dist.get_world_size(group)
    if x.shape[0] % p and heads:
        x = x.repeat_interleave(heads // x.shape[0], dim=0)
    return _Gather.apply(x, group)


def scatter_sequence(y: torch.Tensor, group: Any) -> torch.Tensor:
    """Inverse of `gather_sequence`: `[H/P, P·n, D]` → `[H, n, D]`."""
    return _Scatter.apply(y, group)


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:  # type: ignore[override]
        p, rank = dist.get_world_size(group), dist.get_rank(group)
        ctx.rank, ctx.n = rank, x.shape[0]
        parts = [torch.empty_like(x) for _ in range(p)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        # Every rank computes the same loss from the gathered row: the gradient of this rank's
        # slice is its own slice of the (identical) upstream gradient, not a sum over ranks.
        a = ctx.rank * ctx.n
        return grad[a : a + ctx.n].contiguous(), None


def gather_tokens(x: torch.Tensor, group: Any) -> torch.Tensor:
    """Per-token values of my slice `[n]` → the whole row `[P·n]`, differentiably."""
    return _GatherTokens.apply(x, group)
