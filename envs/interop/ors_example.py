"""A tiny OpenReward (ORS) environment, written the way the `openreward` package defines one,
shipped so `ors:arith` runs offline (tests, `agentrl envs check`).

Each task is a sum; the `add` tool is a scratchpad (no reward), `submit` grades the answer:
reward 1 and finished when it is right, reward 0 and finished when it is wrong. Splits:
`train` (8 sums) and `test` (4 others).
"""

from __future__ import annotations

from openreward.environments import Environment, Split, TextBlock, ToolOutput, tool
from pydantic import BaseModel

_TRAIN = [(3, 4), (12, 30), (7, 8), (25, 17), (40, 2), (9, 9), (61, 5), (14, 28)]
_TEST = [(11, 22), (5, 90), (33, 33), (8, 71)]


class AddArgs(BaseModel):
    a: int
    b: int


class SubmitArgs(BaseModel):
    answer: int


class ArithEnvironment(Environment):
    """Add two numbers and submit the sum."""

    @classmethod
    def list_splits(cls) -> list[Split | str]:
        return [Split(name="train", type="train"), Split(name="test", type="test")]

    @classmethod
    def list_tasks(cls, split: str) -> list[dict[str, int]]:
        pairs = {"train": _TRAIN, "test": _TEST}[split]
        return [{"a": a, "b": b} for a, b in pairs]

    def get_prompt(self) -> list[TextBlock]:
        a, b = self.task_spec["a"], self.task_spec["b"]
        return [TextBlock(text=f"What is {a} + {b}? Use the tools; submit the answer.")]

    @tool
    async def add(self, args: AddArgs) -> ToolOutput:
        """Add two integers."""
        return ToolOutput(blocks=[TextBlock(text=str(args.a + args.b))])

    @tool
    async def submit(self, args: SubmitArgs) -> ToolOutput:
        """Submit the final answer; ends the episode."""
        right = args.answer == int(self.task_spec["a"]) + int(self.task_spec["b"])  # type: ignore[call-overload]
        text = "correct" if right else "wrong"
        return ToolOutput(blocks=[TextBlock(text=text)], reward=float(right), finished=True)
