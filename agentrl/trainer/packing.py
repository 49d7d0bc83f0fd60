"""Padding-free log-probs: a micro-batch's sequences packed into one row (`trainer.packing`).

Why: multi-turn episodes vary a lot in length, so a right-padded micro-batch spends much of
its forward and backward on padding. Packed, the model sees `[1, N]` with N = the sum of the
real lengths, per-sequence position ids (RoPE restarts at every sequence) and attention kept
within each sequence (`agentrl.models.packed_attention`). The lm-head runs only on positions
that predict a response token. Results equal the padded forward's up to float rounding
(`tests/trainer/test_packing.py` checks log-probs and gradients).

With Ulysses (`trainer.ulysses_sp > 1`) the packed row is split in equal slices over the
sequence-parallel group; each rank computes the log-probs of its slice and the whole row's
values are gathered (see `agentrl.backends.sequence_parallel`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from agentrl.config import TrainerConfig
from agentrl.models.packed_attention import enable_packed_attention, packed_kwargs

from .batch import TrainBatch
from .chunked_logprobs import chunked_token_log_probs
from .fused_head import FusedHead
from .levers import UpdateLevers
from .logprobs import response_log_probs


@dataclass
class Packed:
    input_ids: torch.Tensor  # [1, N]
    position_ids: torch.Tensor  # [1, N]
    targets: torch.Tensor  # [N] the next token of each position (0 where none)
    lengths: list[int]  # per segment, incl. a trailing filler segment when padded
    logit_pos: torch.Tensor  # [B, T] packed position predicting response token j, -1 if none


def pack(batch: TrainBatch, multiple: int = 1) -> Packed:
    """Concatenate the batch's rows (right-padded) into one row; the total is rounded up to
    `multiple` with a filler segment of pad ids (never read by any loss)."""
    mask = batch.attention_mask.bool()
    counts = mask.sum(1)
    lengths = [int(n) for n in counts.tolist()]
    dev = batch.input_ids.device
    # Rows are right-padded, so the masked tokens in row-major order are the rows' real
    # tokens back to back: a few kernels, not one per row (the GPU waits on this host work).
    flat = batch.input_ids[mask]
    fill = -sum(lengths) % multiple
    if fill:
        flat = torch.cat([flat, flat.new_zeros(fill)])
        counts = torch.cat([counts, counts.new_tensor([fill])])
        lengths = [*lengths, fill]
    starts = counts.cumsum(0) - counts
    pos = torch.arange(flat.numel(), device=dev) - starts.repeat_interleave(counts)
    offsets = starts[: batch.input_ids.shape[0]]
    targets = torch.zeros_like(flat)
    targets[:-1] = flat[1:]
    index = batch.logit_index
    logit_pos = torch.where(index >= 0, index + offsets.to(index.device)[:, None], -1)
    return Packed(flat[None], pos[None], targets, lengths, logit_pos)


def to_device_async(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device`; host to CUDA from pinned memory without waiting for the device."""
    if device.type != "cuda" or t.device.type != "cpu":
        return t.to(device)
    # A pinned buffer from the caching host allocator, then a copy: `t.pin_memory()` first
    # asks CUDA whether `t` is pinned, which took ~2 ms per update on the H200.
    pinned = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return pinned.copy_(t).to(device, non_blocking=True)


LogProbFn = Callable[[Any, TrainBatch, float], tuple[torch.Tensor, torch.Tensor]]


def build_log_prob_fn(
    cfg: TrainerConfig, model: Any, backend: Any, levers: UpdateLevers | None = None
) -> LogProbFn:
    """The forward the Actor and Reference use: padded, packed, or packed + Ulysses.
    Call before `backend.prepare(model)` (it switches the model's attention). `levers`:
    the Actor's opt-in update levers (`levers.UpdateLevers`; default all off)."""
    if cfg.ulysses_sp > 1 and not cfg.packing:
        raise ValueError("trainer.ulysses_sp > 1 needs trainer.packing=true")
    levers = levers or UpdateLevers()
    levers.check(cfg)
    fused = cfg.update_path == "fused" and backend.plain_modules
    if not cfg.packing:
        return functools.partial(response_log_probs, compiled=cfg.compile, fused=fused)
    group = backend.sequence_parallel_group() if cfg.ulysses_sp > 1 else None
    enable_packed_attention(model, group, traced=levers.traced_attention)
    device = torch.device(backend.device) if levers.host_pack else None
    return PackedLogProbs(group, cfg.compile, fused, bucket=levers.traced_attention, device=device)


class PackedLogProbs:
    """`(log-probs, entropy)` `[B, T]` of a batch's response tokens through a packed forward;
    the same contract as `logprobs.response_log_probs`.

    `bucket`: the longest segment length is rounded up (`packed_kwargs`), for the traced
    attention op. `device`: the model's device when the batch may arrive on the host
    (`UpdateLevers.host_pack`): a host batch is packed there and only the packed tensors
    travel, from pinned memory, without a host sync; the results are on `device`."""

    def __init__(
        self,
        sp_group: Any = None,
        compiled: bool = False,
        fused: bool = False,
        bucket: bool = False,
        device: torch.device | None = None,
    ) -> None:
        self.sp_group = sp_group
        self.compiled = compiled  # the log-softmax reduction through inductor
        self.fused = fused  # lm-head and log-softmax in row chunks (`fused_head`)
        self.bucket = bucket
        self.device = device

    def __call__(
        self, model: Any, batch: TrainBatch, temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if batch.multimodal:
            raise ValueError("trainer.packing does not support multimodal batches yet")
        sp, rank = self._sp()
        p = pack(batch, multiple=sp)
        n = p.input_ids.shape[1] // sp
        lo, hi = rank * n, (rank + 1) * n
        wanted = p.logit_pos[p.logit_pos >= 0]
        local = wanted[(wanted >= lo) & (wanted < hi)] - lo
        # Position 0 is always kept: every rank runs the lm-head (FSDP keeps ranks in step).
        keep = torch.unique(torch.cat([local, local.new_zeros(1)]))
        targets = p.targets[lo + keep]
        dev = p.input_ids.device
        target = self.device
        if target is not None and dev.type == "cpu" and target.type != "cpu":  # host-packed
            dev = target
            move = functools.partial(to_device_async, device=dev)
            ids, pos, logit_pos = move(p.input_ids), move(p.position_ids), move(p.logit_pos)
            p = Packed(ids, pos, p.targets, p.lengths, logit_pos)
            keep, targets = move(keep), move(targets)
        inputs = dict(
            input_ids=p.input_ids[:, lo:hi],
            position_ids=p.position_ids[:, lo:hi],
            use_cache=False,
            **packed_kwargs(p.lengths, dev, self.bucket, non_blocking=self.device is not None),
        )
        head = FusedHead.of(model) if self.fused else None
        if head is not None:
            hidden = head.hidden(**inputs)[0, keep]
            lp, ent = head.log_probs(hidden, targets, temperature, self.compiled)
        else:
            out = model(**inputs, logits_to_keep=keep)
            logits = (out.logits if hasattr(out, "logits") else out)[0]
            lp, ent = chunked_token_log_probs(logits, targets, temperature, self.compiled)
        row_lp = lp.new_zeros(n).index_copy(0, keep, lp)
        row_ent = ent.new_zeros(n).index_copy(0, keep, ent)
        if self.sp_group is not None:
            from agentrl.backends.sequence_parallel import gather_tokens

            row_lp, row_ent = (
                gather_tokens(row_lp, self.sp_group),
                gather_tokens(row_ent, self.sp_group),
            )
        valid = p.logit_pos >= 0
        at = p.logit_pos.clamp(min=0)
        return row_lp[at] * valid, row_ent[at] * valid

    def _sp(self) -> tuple[int, int]:
        if self.sp_group is None:
            return 1, 0
        import torch.distributed as dist

        return dist.get_world_size(self.sp_group), dist.get_rank(self.sp_group)
