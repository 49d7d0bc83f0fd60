"""Shared pieces of the vision envs: image-returning tools and pillow drawing helpers.

A tool answers with an image by returning `ImageReply(text, images)`. `ImageToolSet` keeps the
images aside (keyed by the call object) and lets the text become the `ToolResult` as usual;
`VisionToolEnv` then attaches them to that call's `tool` message, so the observation the rollout
renders carries `Message.images` exactly like a prompt image. `ToolResult` itself stays
text-only and JSON-serializable; images reach trajectories through `Trajectory.multimodal`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.tools.core import ToolSet
from agentrl.types import Message, ToolCall, ToolResult

from ..core import Observation, Task, ToolEnv
from ..math.calc import extract_answer

PALETTE = [
    (220, 50, 47),
    (38, 139, 210),
    (133, 153, 0),
    (211, 54, 130),
    (181, 137, 0),
    (42, 161, 152),
    (108, 113, 196),
]


@dataclass
class ImageReply:
    """A tool result with images: `text` becomes the tool message content."""

    text: str
    images: list[Any] = field(default_factory=list)


class ImageToolSet(ToolSet):
    """A ToolSet whose tools may return `ImageReply`; see the module docstring."""

    def __init__(self, *functions: Any) -> None:
        super().__init__(*functions)
        self._images: dict[int, list[Any]] = {}

    def reset(self) -> None:
        self._images.clear()

    def take_images(self, call: ToolCall) -> list[Any]:
        return self._images.pop(id(call), [])

    def _result(self, call: ToolCall, value: Any, t0: float) -> ToolResult:
        if isinstance(value, ImageReply):
            self._images[id(call)] = list(value.images)
            value = value.text
        return super()._result(call, value, t0)


class VisionToolEnv(ToolEnv):
    """A ToolEnv whose tool messages carry the images their tools returned."""

    family = "vision"

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = await super().astep(action)
        if action.tool_calls and isinstance(self.tools, ImageToolSet):
            for msg, call in zip(obs.messages, action.tool_calls, strict=False):
                msg.images = self.tools.take_images(call)
        return obs, reward, terminated, truncated, info


def color_name(rgb: tuple[int, int, int]) -> str:
    names = ["red", "blue", "green", "magenta", "yellow", "teal", "violet"]
    return names[PALETTE.index(rgb)] if rgb in PALETTE else "gray"


def draw_shape(draw: Any, kind: str, box: tuple[int, int, int, int], fill: Any) -> None:
    """Draw a filled circle, square or triangle inside `box` (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    if kind == "circle":
        draw.ellipse(box, fill=fill)
    elif kind == "square":
        draw.rectangle(box, fill=fill)
    elif kind == "triangle":
        draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=fill)
    else:
        raise ValueError(f"unknown shape {kind!r}")


class BoxedAnswer:
    """Scoring for the single-answer vision tasks: the reply's `\\boxed{...}` must equal
    `task.answer` exactly, and the oracle replies with that box. Mix in before the env base
    class (`class E(BoxedAnswer, ToolEnv)`) so these override its defaults."""

    task: Task | None

    def score(self, final: Message) -> float:
        assert self.task is not None
        return 1.0 if extract_answer(final.content) == self.task.answer else 0.0

    def oracle_action(self) -> Message | None:
        if self.task is None:
            return None
        return Message("assistant", f"\\boxed{{{self.task.answer}}}")
