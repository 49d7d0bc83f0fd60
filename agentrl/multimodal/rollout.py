"""Per-episode image state for the rollout loop.

Each observation (the reset prompt or a turn's env/tool messages) may carry PIL images in
`Message.images`. `expand` processes them and expands their placeholders in the observation's
ids; `commit` records them on the trajectory once those ids are actually appended (an
observation cut by the token budget leaves no dangling image record). `payload` is what the
engine gets on every generate call: all images so far, in sequence order. Engines that run
the vision tower themselves (`multimodal_inputs = "processed"`, the hf vision engine) get the
exact pixel tensors the trajectory records; the others (vLLM, SGLang) get the PIL images.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from agentrl.types import Message, Trajectory

from .processor import ImageInputs, VisionProcessor
from .record import FORMAT, image_entry


@dataclass
class PendingImages:
    """Images of one observation, expanded but not yet recorded."""

    base: int
    offsets: list[int]
    inputs: list[ImageInputs]
    images: list[Any]


@dataclass
class EpisodeImages:
    processor: VisionProcessor | None
    traj: Trajectory
    inputs: list[ImageInputs] = field(default_factory=list)
    images: list[Any] = field(default_factory=list)

    def expand(
        self, messages: Sequence[Message], ids: list[int], base: int
    ) -> tuple[list[int], PendingImages | None]:
        """`ids` (rendered from `messages`) with image placeholders expanded; `base` is where
        they will start in the trajectory's input ids. No-op for text-only messages."""
        images = [img for m in messages for img in m.images]
        if not images:
            return ids, None
        if self.processor is None:
            raise ValueError(
                "the env sent images but the chat format has no vision processor "
                "(load a vision-language model with model.enable_vision=true)"
            )
        inputs = [self.processor.process(img) for img in images]
        out, offsets = self.processor.expand(ids, inputs)
        return out, PendingImages(base, offsets, inputs, images)

    def commit(self, pending: PendingImages | None) -> None:
        if pending is None:
            return
        assert self.processor is not None
        mm = self.traj.multimodal
        if not mm:
            mm.update(format=FORMAT, image_token_id=self.processor.image_token_id, images=[])
        turn = len(self.traj.turns)
        for off, inp, img in zip(pending.offsets, pending.inputs, pending.images, strict=True):
            mm["images"].append(image_entry(inp, pending.base + off, turn, img))
        self.inputs += pending.inputs
        self.images += pending.images

    def payload(self, engine: Any) -> dict[str, Any] | None:
        """The engine's `multimodal=` argument: every image so far, or None before any."""
        if not self.inputs:
            return None
        if engine.multimodal_inputs == "processed":
            return {
                "pixel_values": torch.cat([i.pixel_values for i in self.inputs]),
                "image_grid_thw": torch.tensor([list(i.grid_thw) for i in self.inputs]),
            }
        return {"image": list(self.images)}
