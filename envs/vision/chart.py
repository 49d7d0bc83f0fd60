"""`vision/bar-chart-v0`: read one bar's value off a rendered bar chart.

* Observation: a user message with a pillow-drawn bar chart (3..`max_bars` bars labelled A, B,
  ..., integer values 1..`max_value`, a labelled y axis with a gridline per unit) and a
  question ("What is the value of bar C?").
* Reward: 1.0 if the final answer (`\\boxed{n}` or the last number) equals the bar's value.
* Single turn, no tools. Oracle: the value.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np

from agentrl.types import Message

from ..core import Task, ToolEnv
from .core import PALETTE, BoxedAnswer


def render_bar_chart(values: list[int], max_value: int, size: int) -> Any:
    """A `size`x`size` bar chart of `values` with labels A, B, ... and a y axis 0..max."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    left, right, top, bottom = size // 8, size - size // 16, size // 16, size - size // 8
    unit = (bottom - top) / max_value
    for v in range(max_value + 1):
        y = round(bottom - v * unit)
        draw.line([(left, y), (right, y)], fill=(210, 210, 210))
        draw.text((2, y - 5), str(v), fill=(0, 0, 0))
    draw.line([(left, top), (left, bottom), (right, bottom)], fill=(0, 0, 0))
    slot = (right - left) / len(values)
    for i, v in enumerate(values):
        x0 = round(left + i * slot + slot * 0.2)
        x1 = round(left + (i + 1) * slot - slot * 0.2)
        draw.rectangle([x0, round(bottom - v * unit), x1, bottom], fill=PALETTE[i % len(PALETTE)])
        draw.text(((x0 + x1) // 2 - 3, bottom + 3), string.ascii_uppercase[i], fill=(0, 0, 0))
    return img


class BarChartEnv(BoxedAnswer, ToolEnv):
    family = "vision"
    description = "Read a bar's value from a rendered bar chart (single turn); oracle available."
    max_turns = 1

    def __init__(self, image_size: int = 224, max_bars: int = 5, max_value: int = 9) -> None:
        super().__init__(None, 1)
        if not 3 <= max_bars <= 8:
            raise ValueError(f"max_bars must be in 3..8, got {max_bars}")
        self.image_size, self.max_bars, self.max_value = image_size, max_bars, max_value

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        k = int(rng.integers(3, self.max_bars + 1))
        values = [int(v) for v in rng.integers(1, self.max_value + 1, size=k)]
        i = int(rng.integers(k))
        label = string.ascii_uppercase[i]
        img = render_bar_chart(values, self.max_value, self.image_size)
        text = f"What is the value of bar {label}? Answer with \\boxed{{n}}."
        info = {"values": values, "bar": label}
        return Task([Message("user", text, images=[img])], answer=str(values[i]), info=info)
