"""Image -> pixel inputs, and template placeholder -> the right number of image tokens.

Why not call the HF processor on text: the rollout never re-tokenizes. Prompts and observation
deltas are rendered by `ChatFormat` (the chat template emits one `<|image_pad|>` per image) and
encoded once; `expand` then replaces each pad with `num_tokens` copies, computed from the same
`image_grid_thw` the vision tower will see. Token counts and pixel inputs therefore agree by
construction, per image and per turn (the "image features and image tokens do not match" class
of bugs cannot arise from a stale or re-rendered prompt).

Images are processed one at a time: Qwen2-VL's processor resizes and patchifies each image
independently, so per-image outputs concatenated in order equal the batched call, and each
image's slice of `pixel_values` is known exactly (no slicing by guessed sizes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

IMAGE_TOKEN = "<|image_pad|>"


@dataclass
class ImageInputs:
    """One image as the vision tower sees it."""

    pixel_values: torch.Tensor  # [patches, channels * temporal_patch * patch * patch] float32
    grid_thw: tuple[int, int, int]
    merge_size: int

    @property
    def num_tokens(self) -> int:
        """Placeholder tokens this image occupies in the LM sequence."""
        t, h, w = self.grid_thw
        return t * h * w // (self.merge_size**2)


class VisionProcessor:
    """An image processor plus the tokenizer ids it needs for placeholder expansion."""

    def __init__(self, image_processor: Any, tokenizer: Any, image_token: str = IMAGE_TOKEN):
        self.image_processor = image_processor
        self.image_token = image_token
        vocab = tokenizer.get_vocab()
        if image_token not in vocab:
            raise ValueError(f"tokenizer has no {image_token!r} token; is this a vision model?")
        self.image_token_id = int(vocab[image_token])
        self.merge_size = int(getattr(image_processor, "merge_size", 2))

    @classmethod
    def from_pretrained(cls, path: str, tokenizer: Any) -> VisionProcessor:
        from transformers import AutoImageProcessor

        return cls(AutoImageProcessor.from_pretrained(path), tokenizer)

    def process(self, image: Any) -> ImageInputs:
        """Pixel inputs of one PIL image (converted to RGB first, as the model expects)."""
        if image is None:
            raise ValueError("image is None (images are not stored inline in JSONL messages)")
        if hasattr(image, "convert"):
            image = image.convert("RGB")
        out = self.image_processor(images=[image], return_tensors="pt")
        pixel_values = torch.as_tensor(out["pixel_values"], dtype=torch.float32).contiguous()
        grid = [int(x) for x in torch.as_tensor(out["image_grid_thw"]).reshape(-1, 3)[0]]
        inputs = ImageInputs(pixel_values, (grid[0], grid[1], grid[2]), self.merge_size)
        if pixel_values.shape[0] != grid[0] * grid[1] * grid[2]:
            raise ValueError(f"processor gave {pixel_values.shape[0]} patches for grid {grid}")
        return inputs

    def expand(
        self, ids: Sequence[int], images: Sequence[ImageInputs]
    ) -> tuple[list[int], list[int]]:
        """Replace the i-th `<|image_pad|>` in `ids` by `images[i].num_tokens` copies.

        Returns (expanded ids, start index of each image's span in them). The number of pads
        must equal the number of images: a mismatch means the template dropped an image part
        or the text itself contained the placeholder string, and is an error here rather than
        a shape error in the vision tower later.
        """
        pads = [i for i, t in enumerate(ids) if t == self.image_token_id]
        if len(pads) != len(images):
            raise ValueError(
                f"rendered text has {len(pads)} {self.image_token} placeholders for "
                f"{len(images)} images (does the chat template render image parts?)"
            )
        out: list[int] = []
        offsets: list[int] = []
        prev = 0
        for pos, img in zip(pads, images, strict=True):
            out.extend(ids[prev:pos])
            offsets.append(len(out))
            out.extend([self.image_token_id] * img.num_tokens)
            prev = pos + 1
        out.extend(ids[prev:])
        return out, offsets


def load_vision_processor(path: str, tokenizer: Any) -> VisionProcessor:
    """The processor of a checkpoint directory (`tiny-vlm:` presets resolved by the caller)."""
    return VisionProcessor.from_pretrained(path, tokenizer)
