"""Batched decode for `HFVisionEngine`: the requests past their prefill share one forward per step.

Why this is exact: after prefill, a Qwen-VL row decodes plain text, whose M-RoPE position is one
scalar on all three axes (`max(prompt positions) + 1 + k`). So the running rows fit the text
engine's `_kvbatch.KVBatch` as is: per-row KV left-padded to one length with a [B, L] mask,
`positions` [B] (expanded to [3, B, 1] here), `next_tokens` [B]. Rows join after their own
prefill (`join`) and leave when done (`kvb.select`, with `kvb.extract_row` for sessions).
Sampling is per row with the row's own generator, so a seeded request draws the same tokens
whatever shares its batch. Deepstack (Qwen3-VL) only acts on forwards with pixels, never here.
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.engines import _kvbatch as kvb
from agentrl.engines._hf_core import Request
from agentrl.engines._sampling import sample_tokens


def join(
    runner: kvb.ModelRunner, batch: kvb.KVBatch | None, cache: Any, next_pos: int, token: int
) -> kvb.KVBatch:
    """Append a freshly prefilled row (its own [1, H, L, D] cache) to the running batch."""
    length = cache.get_seq_length()
    device = kvb.ModelRunner.tensors(cache)[0][0].device
    row = kvb.KVBatch(
        cache,
        torch.ones(1, length, dtype=torch.long, device=device),
        torch.tensor([next_pos], device=device),
        torch.tensor([token], device=device),
    )
    return kvb.merge(runner, batch, row)


def decode(runner: kvb.ModelRunner, batch: kvb.KVBatch) -> torch.Tensor:
    """Feed every row its `next_tokens` at its own 3D position; logits [B, V], batch advanced."""
    ones = torch.ones(batch.size, 1, dtype=batch.mask.dtype, device=batch.mask.device)
    batch.mask = torch.cat([batch.mask, ones], dim=1)
    positions = batch.positions.view(1, -1, 1).expand(3, -1, 1)
    logits, batch.cache = runner.forward(
        batch.next_tokens[:, None], batch.mask, positions, batch.cache
    )
    batch.positions = batch.positions + 1
    return logits


def sample_rows(
    rows: list[Request], logits: torch.Tensor, banned: list[int]
) -> tuple[list[int], list[float]]:
    """Sample one token per row with image/video placeholders filtered out: a sampled
    placeholder would have no pixels behind it and break every later forward. Like top-k, the
    filter only shapes sampling; the logprob is of the unfiltered tempered distribution, as the
    trainer recomputes it."""
    dev = logits.device
    logits = logits.float()
    allowed = logits.clone()
    allowed[:, banned] = float("-inf")
    temp = torch.tensor([r.params.temperature for r in rows], device=dev)
    tokens, _ = sample_tokens(
        allowed,
        temp,
        torch.tensor([r.params.top_k for r in rows], dtype=torch.long, device=dev),
        torch.tensor([r.params.top_p for r in rows], device=dev),
        [r.generator for r in rows],
    )
    scale = torch.where(temp > 0, temp, torch.ones_like(temp))
    logp = torch.log_softmax(logits / scale[:, None], dim=-1)
    lps = logp.gather(-1, tokens[:, None]).squeeze(-1)
    return [int(t) for t in tokens.tolist()], [float(x) for x in lps.tolist()]
