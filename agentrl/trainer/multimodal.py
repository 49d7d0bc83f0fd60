"""Model kwargs for a batch whose trajectories carry images (vision-language policies).

The rollout recorded, per image, the exact pixel values it fed the engine and where that
image's placeholder span sits in the sequence (`agentrl.multimodal.record`). Here those are
stacked in row order, then image order within a row: the order in which a Qwen2-VL style
model scatters image features into the placeholder positions of a `[B, L]` batch (row-major).
Keeping that order explicit is what prevents the "wrong pixel_values slice" class of bugs when
micro-batching selects arbitrary rows.

With `input_ids`, spans are checked against the ids (a mismatch raises naming the row), and
`mm_token_type_ids` (1 on image tokens) is built: transformers needs it to compute the 3D
M-RoPE positions, which must equal the positions the engine used while sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentrl.multimodal.record import check_alignment, decode_pixel_values, image_entries


def stack_multimodal(
    multimodal: Sequence[dict[str, Any]],
    device: torch.device | str,
    input_ids: torch.Tensor | None = None,
) -> dict[str, Any]:
    """`pixel_values` [sum patches, D], `image_grid_thw` [n_images, 3] (and, given
    `input_ids` [B, L], `mm_token_type_ids` [B, L]) for one batch; {} when no row has images.

    `multimodal[i]` is row i's `Trajectory.multimodal` ({} for a text-only row).
    """
    pixels: list[torch.Tensor] = []
    grids: list[list[int]] = []
    type_ids = None if input_ids is None else torch.zeros_like(input_ids, dtype=torch.int32)
    for row, mm in enumerate(multimodal):
        entries = image_entries(mm)
        if not entries:
            continue
        if input_ids is not None and type_ids is not None:
            try:
                check_alignment(input_ids[row].cpu(), mm)
            except ValueError as err:
                raise ValueError(f"batch row {row}: {err}") from err
        for e in entries:
            pv = decode_pixel_values(e)
            t, h, w = (int(x) for x in e["grid_thw"])
            if pv.shape[0] != t * h * w:
                raise ValueError(f"batch row {row}: {pv.shape[0]} patches for grid {[t, h, w]}")
            pixels.append(pv)
            grids.append([t, h, w])
            if type_ids is not None:
                start = int(e["offset"])
                type_ids[row, start : start + int(e["num_tokens"])] = 1
    if not pixels:
        return {}
    out: dict[str, Any] = {
        "pixel_values": torch.cat(pixels).to(device),
        "image_grid_thw": torch.tensor(grids, dtype=torch.long, device=device),
    }
    if type_ids is not None:
        out["mm_token_type_ids"] = type_ids.to(device)
    return out
