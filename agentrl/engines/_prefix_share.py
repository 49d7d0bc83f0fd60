"""Prefill sharing for the fast hf path: identical rows of one admission are computed once.

Why: GRPO samples every prompt n times, so one admission holds n requests with the same
prompt ids, and eager prefill is the main rollout cost on GPU. Rows with the same key (their
start column and full prompt ids, so the cached prefix [0, start) holds the same tokens too)
are prefilled once; the source row's new K/V columns [start, start + len) are copied into
the duplicates' slots (one broadcast copy per group and cache, no per-layer loop), and the
duplicates reuse the source's last-token logits. Each row still samples with its own seed.

Only rows admitted together are shared: there is no cross-call (radix) cache.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import torch

from agentrl.engines._static_model import StaticDecoder

Row = tuple[int, int, Sequence[int]]  # (slot, start, new tokens), as `StaticDecoder.prefill`


@dataclass
class SharePlan:
    """Which rows to compute, and how every row gets its logits and K/V."""

    unique: list[int] = field(default_factory=list)  # indices of the rows to compute
    source: list[int] = field(default_factory=list)  # per row: its row in the computed logits
    copies: dict[int, list[int]] = field(default_factory=dict)  # source row -> duplicate rows


def plan_share(keys: Sequence[Hashable]) -> SharePlan:
    """Group rows by key; the first row of each group is computed, the rest copy it."""
    plan = SharePlan()
    first: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        j = first.get(key)
        if j is None:
            first[key] = i
            plan.source.append(len(plan.unique))
            plan.unique.append(i)
        else:
            plan.source.append(plan.source[j])
            plan.copies.setdefault(j, []).append(i)
    return plan


def prefill_shared(
    decoder: StaticDecoder,
    rows: Sequence[Row],
    keys: Sequence[Hashable] | None,
    prefill: Callable[[Sequence[Row]], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, int]:
    """`prefill(rows)` (default `decoder.prefill`) computing each key once (`keys=None`: no
    sharing).

    Returns the last-token logits of every row [n, V] and the number of new tokens that
    were copied instead of computed."""
    prefill = prefill or decoder.prefill
    if keys is None:
        return prefill(rows), 0
    plan = plan_share(keys)
    if not plan.copies:
        return prefill(rows), 0
    logits = prefill([rows[i] for i in plan.unique])
    shared = 0
    for src, dups in plan.copies.items():
        slot, start, toks = rows[src]
        copy_columns(decoder, slot, [rows[d][0] for d in dups], start, start + len(toks))
        shared += len(dups) * len(toks)
    index = torch.tensor(plan.source, device=logits.device)
    return logits.index_select(0, index), shared


def copy_columns(
    decoder: StaticDecoder, src: int, dsts: Sequence[int], start: int, end: int
) -> None:
    """Copy cache columns [start, end) of slot `src` into slots `dsts`, all layers at once."""
    index = torch.tensor(list(dsts), dtype=torch.long, device=decoder.device)
    for cache in (decoder.k, decoder.v):
        cache[:, index, :, start:end] = cache[:, src : src + 1, :, start:end]
