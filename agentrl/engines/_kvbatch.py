"""The hf engine's running batch: one left-aligned KV cache shared by all decoding rows.

Layout: every layer's keys/values are [B, H, L, D]; `mask` [B, L] marks which columns hold
real tokens. Rows are right-aligned (their newest token is always the last column), so one
decode step appends one column for everybody. Rows may have holes: a session that reuses a
cached prefix is laid out as [pad][prefix][pad][new suffix], which the 2D attention mask and
explicit position ids make exact. Tensors are only copied when rows join (prefill + merge) or
leave (select + trim), never per decode step.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

KV = list[tuple[torch.Tensor, torch.Tensor]]


class ModelRunner:
    """Calls a transformers causal LM with an explicit cache, across transformers versions."""

    def __init__(self, model: Any) -> None:
        from transformers import DynamicCache

        self.model = model
        self._cache_cls = DynamicCache
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = "logits_to_keep" if "logits_to_keep" in params else None

    def make_cache(self, kv: KV | None) -> Any:
        cache = self._cache_cls()
        for layer, (k, v) in enumerate(kv or []):
            cache.update(k, v, layer)
        return cache

    @staticmethod
    def tensors(cache: Any) -> KV:
        if hasattr(cache, "layers"):
            return [(layer.keys, layer.values) for layer in cache.layers]
        return list(zip(cache.key_cache, cache.value_cache, strict=True))

    def forward(
        self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any
    ) -> tuple[torch.Tensor, Any]:
        """Last-position logits [B, V] (float32) and the grown cache."""
        kwargs: dict[str, Any] = {self._cache_kw: cache}
        if self._keep_kw:
            kwargs[self._keep_kw] = 1
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **kwargs,
        )
        new_cache = getattr(out, "cache", None) or out.past_key_values
        return out.logits[:, -1, :].float(), new_cache


@dataclass
class KVBatch:
    """Decoding rows' cache (`cache` holds [B, H, L, D] per layer) and per-row cursors."""

    cache: Any
    mask: torch.Tensor  # [B, L] long
    positions: torch.Tensor  # [B] position id of the next input token
    next_tokens: torch.Tensor  # [B] last sampled token, not yet in the cache

    @property
    def size(self) -> int:
        return int(self.mask.shape[0])


def prefill(
    runner: ModelRunner,
    suffixes: Sequence[Sequence[int]],
    prefixes: Sequence[KV | None],
    device: torch.device,
) -> tuple[torch.Tensor, KVBatch]:
    """Run the uncached suffix of each new row on top of its cached prefix (if any).

    Returns the logits at each row's last token and a batch whose `next_tokens` the caller
    fills with the tokens it samples from those logits.
    """
    plen = [0 if kv is None else kv[0][0].shape[2] for kv in prefixes]
    big_p, big_s = max(plen), max(len(s) for s in suffixes)
    rows = len(suffixes)
    ids = torch.zeros(rows, big_s, dtype=torch.long)
    pos = torch.zeros(rows, big_s, dtype=torch.long)
    mask = torch.zeros(rows, big_p + big_s, dtype=torch.long)
    for i, (suffix, p) in enumerate(zip(suffixes, plen, strict=True)):
        s = len(suffix)
        ids[i, big_s - s :] = torch.tensor(list(suffix), dtype=torch.long)
        pos[i, big_s - s :] = torch.arange(p, p + s)
        mask[i, big_p - p : big_p] = 1
        mask[i, big_p + big_s - s :] = 1
    kv = _stack_prefixes(prefixes, plen, big_p) if big_p else None
    mask = mask.to(device)
    logits, cache = runner.forward(ids.to(device), mask, pos.to(device), runner.make_cache(kv))
    positions = torch.tensor([p + len(s) for p, s in zip(plen, suffixes, strict=True)])
    empty = torch.zeros(rows, dtype=torch.long, device=device)
    return logits, KVBatch(cache, mask, positions.to(device), empty)


def _stack_prefixes(prefixes: Sequence[KV | None], plen: list[int], big_p: int) -> KV:
    """Left-pad each row's [1, H, p, D] prefix to `big_p` and stack rows, layer by layer."""
    ref = next(kv for kv in prefixes if kv is not None)
    out: KV = []
    for layer, (k_ref, v_ref) in enumerate(ref):
        ks, vs = [], []
        for kv, p in zip(prefixes, plen, strict=True):
            if kv is None:
                ks.append(k_ref.new_zeros(*k_ref.shape[:2], big_p, k_ref.shape[3]))
                vs.append(v_ref.new_zeros(*v_ref.shape[:2], big_p, v_ref.shape[3]))
            else:
                ks.append(F.pad(kv[layer][0], (0, 0, big_p - p, 0)))
                vs.append(F.pad(kv[layer][1], (0, 0, big_p - p, 0)))
        out.append((torch.cat(ks), torch.cat(vs)))
    return out


def decode(runner: ModelRunner, batch: KVBatch) -> torch.Tensor:
    """Feed every row its `next_tokens`; returns logits [B, V] and advances the batch."""
    ones = torch.ones(batch.size, 1, dtype=batch.mask.dtype, device=batch.mask.device)
    batch.mask = torch.cat([batch.mask, ones], dim=1)
    logits, batch.cache = runner.forward(
        batch.next_tokens[:, None], batch.mask, batch.positions[:, None], batch.cache
    )
    batch.positions = batch.positions + 1
    return logits


def merge(runner: ModelRunner, a: KVBatch | None, b: KVBatch) -> KVBatch:
    """Stack two batches' rows, left-padding the shorter cache."""
    if a is None or a.size == 0:
        return b
    length = max(a.mask.shape[1], b.mask.shape[1])
    kv: KV = []
    for (ka, va), (kb, vb) in zip(runner.tensors(a.cache), runner.tensors(b.cache), strict=True):
        kv.append(
            (
                torch.cat([_lpad(ka, length, 2), _lpad(kb, length, 2)]),
                torch.cat([_lpad(va, length, 2), _lpad(vb, length, 2)]),
            )
        )
    return KVBatch(
        runner.make_cache(kv),
        torch.cat([_lpad(a.mask, length, 1), _lpad(b.mask, length, 1)]),
        torch.cat([a.positions, b.positions]),
        torch.cat([a.next_tokens, b.next_tokens]),
    )


def select(runner: ModelRunner, batch: KVBatch, keep: list[int]) -> KVBatch | None:
    """Keep only rows `keep` and drop leading columns no remaining row uses."""
    if not keep:
        return None
    if keep == list(range(batch.size)):
        return batch
    idx = torch.tensor(keep, device=batch.mask.device)
    mask = batch.mask.index_select(0, idx)
    start = int(mask.any(dim=0).long().argmax().item())
    kv = [
        (k.index_select(0, idx)[:, :, start:], v.index_select(0, idx)[:, :, start:])
        for k, v in runner.tensors(batch.cache)
    ]
    return KVBatch(
        runner.make_cache(kv),
        mask[:, start:],
        batch.positions.index_select(0, idx),
        batch.next_tokens.index_select(0, idx),
    )


def extract_row(runner: ModelRunner, batch: KVBatch, row: int) -> KV:
    """Row `row`'s cache without holes, as [1, H, n, D] per layer (for session reuse)."""
    cols = batch.mask[row].nonzero().squeeze(-1)
    return [
        (k[row : row + 1, :, cols], v[row : row + 1, :, cols])
        for k, v in runner.tensors(batch.cache)
    ]


def _lpad(t: torch.Tensor, length: int, dim: int) -> torch.Tensor:
    missing = length - t.shape[dim]
    if missing == 0:
        return t
    pad = [0, 0] * (t.dim() - 1 - dim) + [missing, 0]
    return F.pad(t, pad)
