"""What a trajectory keeps per image, as plain JSON, so training sees what the rollout saw.

`Trajectory.multimodal` of a vision episode:

    {"format": "agentrl-images/v1", "image_token_id": 151655,
     "images": [{"offset": 37, "num_tokens": 4, "grid_thw": [1, 4, 4], "merge_size": 2,
                 "turn": 0, "pixel_values": {"shape": [16, 1176], "dtype": "float32",
                                             "b64": "..."},
                 "png": "..."}, ...]}

`offset` indexes `Trajectory.input_ids` (prompt + response): the image's placeholder span is
`input_ids[offset : offset + num_tokens]`. Pixel values are stored as raw little-endian bytes
in base64, so a JSONL round trip is bit-exact and the trainer never re-runs a processor whose
version or settings may differ from the rollout's. `png` is a small copy of the source image
for the viewer only. Images are in sequence order, which is the order the model consumes them.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .processor import ImageInputs

FORMAT = "agentrl-images/v1"
_DTYPES = {"float32": np.float32, "float16": np.float16}


def encode_array(t: torch.Tensor) -> dict[str, Any]:
    arr = t.detach().cpu().contiguous().numpy()
    dtype = str(arr.dtype)
    if dtype not in _DTYPES:
        arr, dtype = arr.astype(np.float32), "float32"
    data = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
    return {"shape": list(arr.shape), "dtype": dtype, "b64": base64.b64encode(data).decode()}


def decode_array(d: dict[str, Any]) -> torch.Tensor:
    dtype = np.dtype(_DTYPES[d["dtype"]]).newbyteorder("<")
    arr = np.frombuffer(base64.b64decode(d["b64"]), dtype=dtype).reshape(d["shape"])
    return torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="), copy=True))


def png_b64(image: Any) -> str | None:
    """A PNG of the source image for the viewer (None when there is no PIL image)."""
    if image is None or not hasattr(image, "save"):
        return None
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


def image_entry(inputs: ImageInputs, offset: int, turn: int, image: Any = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "offset": int(offset),
        "num_tokens": inputs.num_tokens,
        "grid_thw": list(inputs.grid_thw),
        "merge_size": inputs.merge_size,
        "turn": turn,
        "pixel_values": encode_array(inputs.pixel_values),
    }
    png = png_b64(image)
    if png is not None:
        entry["png"] = png
    return entry


def image_entries(mm: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The per-image entries of a trajectory's `multimodal` dict (empty for text episodes)."""
    if not mm:
        return []
    fmt = mm.get("format")
    if fmt != FORMAT:
        raise ValueError(f"unsupported Trajectory.multimodal format {fmt!r}; expected {FORMAT}")
    return list(mm.get("images", []))


def decode_pixel_values(entry: dict[str, Any]) -> torch.Tensor:
    return decode_array(entry["pixel_values"])


def check_alignment(input_ids: Sequence[int] | torch.Tensor, mm: dict[str, Any]) -> None:
    """Every recorded span holds only image tokens, and no image token lies outside the spans.

    Raises naming the image: the trainer's forward would otherwise fail deep in the model with
    a features/tokens count mismatch, or silently scatter features into the wrong positions.
    """
    ids = torch.as_tensor(input_ids).reshape(-1)
    entries = image_entries(mm)
    if not entries:
        return
    tok = int(mm["image_token_id"])
    covered = torch.zeros(ids.shape[0], dtype=torch.bool)
    for k, e in enumerate(entries):
        t, h, w = e["grid_thw"]
        n, start = int(e["num_tokens"]), int(e["offset"])
        if n != t * h * w // int(e["merge_size"]) ** 2:
            raise ValueError(f"image {k}: {n} tokens recorded for grid {e['grid_thw']}")
        span = ids[start : start + n]
        if span.shape[0] != n or not bool((span == tok).all()):
            raise ValueError(f"image {k}: input_ids[{start}:{start + n}] are not image tokens")
        covered[start : start + n] = True
    stray = int(((ids == tok) & ~covered).sum())
    if stray:
        raise ValueError(f"{stray} image placeholder tokens lie outside every recorded image")
