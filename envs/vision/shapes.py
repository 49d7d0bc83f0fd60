"""`vision/count-shapes-v0`: count the shapes (or shapes of one kind) in a rendered image.

* Observation: one user message with a pillow-drawn image of 1..`max_shapes` filled circles,
  squares and triangles on a white canvas, and a question ("How many triangles are in the
  image?"). Shapes sit in distinct cells of a 4x4 grid, so they never overlap.
* Reward: 1.0 if the final answer (`\\boxed{n}` or the last number) equals the count.
* Single turn, no tools. Oracle: the count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentrl.types import Message

from ..core import Task, ToolEnv
from .core import PALETTE, BoxedAnswer, draw_shape

KINDS = ("circle", "square", "triangle")
_GRID = 4


def render_shapes(
    rng: np.random.Generator, size: int, n: int
) -> tuple[Any, list[tuple[str, tuple[int, int, int]]]]:
    """A `size`x`size` image with `n` non-overlapping shapes; returns (image, [(kind, rgb)])."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    cell = size // _GRID
    cells = rng.choice(_GRID * _GRID, size=n, replace=False)
    shapes = []
    for c in cells.tolist():
        kind = KINDS[int(rng.integers(len(KINDS)))]
        color = PALETTE[int(rng.integers(len(PALETTE)))]
        side = int(rng.integers(cell * 5 // 10, cell * 8 // 10 + 1))
        x = (c % _GRID) * cell + int(rng.integers(0, cell - side + 1))
        y = (c // _GRID) * cell + int(rng.integers(0, cell - side + 1))
        draw_shape(draw, kind, (x, y, x + side - 1, y + side - 1), color)
        shapes.append((kind, color))
    return img, shapes


class CountShapesEnv(BoxedAnswer, ToolEnv):
    family = "vision"
    description = "Count shapes in a rendered image (single turn); oracle available."
    max_turns = 1

    def __init__(self, image_size: int = 224, max_shapes: int = 6, by_kind: bool = True) -> None:
        super().__init__(None, 1)
        if not 1 <= max_shapes <= _GRID * _GRID:
            raise ValueError(f"max_shapes must be in 1..{_GRID * _GRID}, got {max_shapes}")
        self.image_size, self.max_shapes, self.by_kind = image_size, max_shapes, by_kind

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        n = int(rng.integers(1, self.max_shapes + 1))
        img, shapes = render_shapes(rng, self.image_size, n)
        target = str(rng.choice(KINDS)) if self.by_kind and rng.random() < 0.5 else "shape"
        count = n if target == "shape" else sum(k == target for k, _ in shapes)
        text = f"How many {target}s are in the image? Answer with \\boxed{{n}}."
        return Task([Message("user", text, images=[img])], answer=str(count), info={"n": n})
