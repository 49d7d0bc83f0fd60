"""Gradient reduction and clipping for the Megatron backend without Megatron's DDP/optimizer.

Why not Megatron's `DistributedDataParallel` + `get_megatron_optimizer`: the Actor owns a
plain torch optimizer and calls `backend.clip_grad_norm` once per optimizer step, after all
micro-batches; reducing there keeps the Actor unchanged. Expert weights are replicated over
the expert-data-parallel group (Megatron marks them `allreduce = False`), everything else
over the data-parallel group. With one rank every collective here is skipped.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist


def _groups() -> tuple[Any, Any, Any, int]:  # megatron's ProcessGroups (untyped package)
    from megatron.core import parallel_state as ps

    return (
        ps.get_data_parallel_group(),
        ps.get_expert_data_parallel_group(),
        ps.get_model_parallel_group(),
        ps.get_tensor_model_parallel_rank(),
    )


def reduce_data_parallel(model: torch.nn.Module) -> None:
    """Sum each gradient over the ranks that hold a replica of its parameter."""
    if dist.get_world_size() == 1:
        return
    dp, edp, _, _ = _groups()
    for p in model.parameters():
        if p.grad is None:
            continue
        group = dp if getattr(p, "allreduce", True) else edp
        if dist.get_world_size(group) > 1:
            dist.all_reduce(p.grad, group=group)


def clip_global(model: torch.nn.Module, max_norm: float) -> float:
    """Clip by the norm of the full (unsharded) gradient; returns that norm."""
    grads = [p for p in model.parameters() if p.grad is not None]
    if dist.get_world_size() == 1:
        return float(torch.nn.utils.clip_grad_norm_(grads, max_norm))
    _, _, mp, tp_rank = _groups()
    tensors = [(p, p.grad) for p in grads if p.grad is not None]  # the same list, narrowed
    sq = torch.zeros((), dtype=torch.float32, device=tensors[0][1].device if tensors else "cpu")
    for p, grad in tensors:
        sharded = getattr(p, "tensor_model_parallel", False)
        if sharded or tp_rank == 0:  # replicated over TP: count on one rank only
            sq += grad.float().pow(2).sum()
    dist.all_reduce(sq, group=mp)
    norm = float(sq.sqrt())
    scale = max_norm / (norm + 1e-6)
    if scale < 1.0:
        for _, grad in tensors:
            grad.mul_(scale)
    return norm
