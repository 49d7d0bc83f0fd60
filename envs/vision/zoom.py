"""`vision/zoom-v0`: multi-turn; a `zoom` tool returns a close-up image of one region.

* Observation: a user message with a cluttered image; a 3-digit code is written in a tiny font
  in one quadrant, too small to read at the model's input resolution.
* Tools: `zoom(region)` with region in top-left / top-right / bottom-left / bottom-right; the
  tool message carries the quadrant cropped and upscaled 2x (an image observation mid-episode).
* Reward: 1.0 if the final answer (`\\boxed{n}` or the last number) is the code.
* Oracle: zoom into the quadrant holding the code, then answer it.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from agentrl.tools.core import tool
from agentrl.types import Message, ToolCall

from ..core import Task
from .core import PALETTE, BoxedAnswer, ImageReply, ImageToolSet, VisionToolEnv, draw_shape

REGIONS = ("top-left", "top-right", "bottom-left", "bottom-right")
Region = Literal["top-left", "top-right", "bottom-left", "bottom-right"]


class ZoomTools(ImageToolSet):
    """The episode's image and a tool that crops it."""

    def __init__(self) -> None:
        super().__init__()
        self.image: Any = None

    def reset(self) -> None:
        super().reset()
        self.image = None

    @tool
    def zoom(self, region: Region) -> ImageReply:
        """Show one quadrant of the image enlarged two times.

        Args:
            region: Which quadrant to enlarge.
        """
        if self.image is None:
            raise RuntimeError("no image to zoom into")
        w, h = self.image.size
        col, row = REGIONS.index(region) % 2, REGIONS.index(region) // 2
        box = (col * w // 2, row * h // 2, (col + 1) * w // 2, (row + 1) * h // 2)
        crop = self.image.crop(box).resize((w, h))
        return ImageReply(f"Zoomed into the {region} quadrant.", [crop])


def render_scene(rng: np.random.Generator, size: int, code: str, region: int) -> Any:
    """Clutter shapes everywhere, the code in small text inside quadrant `region`."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (245, 245, 240))
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        side = int(rng.integers(size // 20, size // 8))
        x, y = (int(v) for v in rng.integers(0, size - side, size=2))
        kind = ("circle", "square", "triangle")[int(rng.integers(3))]
        draw_shape(draw, kind, (x, y, x + side, y + side), PALETTE[int(rng.integers(7))])
    half = size // 2
    x0 = (region % 2) * half + int(rng.integers(4, max(5, half - 30)))
    y0 = (region // 2) * half + int(rng.integers(4, max(5, half - 16)))
    draw.rectangle([x0 - 2, y0 - 2, x0 + 22, y0 + 12], fill=(255, 255, 255))
    draw.text((x0, y0), code, fill=(0, 0, 0))
    return img


class ZoomEnv(BoxedAnswer, VisionToolEnv):
    description = "Read a tiny code by zooming into image regions (multi-turn, image tool)."
    max_turns = 4

    def __init__(self, image_size: int = 448, max_turns: int | None = None) -> None:
        super().__init__(ZoomTools(), max_turns)
        self.image_size = image_size

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        code = str(int(rng.integers(100, 1000)))
        region = int(rng.integers(len(REGIONS)))
        img = render_scene(rng, self.image_size, code, region)
        assert isinstance(self.tools, ZoomTools)
        self.tools.image = img
        text = (
            "A 3-digit code is written somewhere in this image, too small to read here. "
            "Use the zoom tool to look at a quadrant up close, then answer with \\boxed{code}."
        )
        info = {"region": REGIONS[region]}
        return Task([Message("user", text, images=[img])], answer=code, info=info)

    def oracle_action(self) -> Message | None:
        if self.task is None:
            return None
        if self.turn == 0:
            call = ToolCall("zoom", {"region": self.task.info["region"]}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"The code is \\boxed{{{self.task.answer}}}.")
