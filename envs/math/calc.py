"""`math/calc-v0`: multi-turn arithmetic with a calculator tool.

* Observation: a user question "What is 37 * 48 + 12?"; tool results as `tool` messages.
* Tools: `calculator(expression)` (exact, parsed, never `eval`).
* Reward: 1.0 if the final message's answer equals the exact value, else 0.0. The answer is
  read from `\\boxed{...}` if present, else the last number in the message.
* Termination: a message with no tool call ends the episode; `max_turns` truncates.
* Difficulty: `n_operands` (2..6), `max_value` (operand magnitude), `ops` (subset of "+-*");
  `min_value` (default 2) keeps e.g. `math/calc-mul-v0`'s operands two- or three-digit.
* `tools=False` poses the same questions without the calculator (a no-tool baseline).
* Oracle: call the calculator on the question's expression, then answer with its result.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from agentrl.tools import ToolSet
from agentrl.tools.calculator import calculator, evaluate, format_number

from agentrl.types import Message, ToolCall

from ..core import Task, ToolEnv

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def extract_answer(text: str) -> str | None:
    """The boxed answer, else the last number in the text."""
    boxed = _BOXED.findall(text)
    if boxed:
        return boxed[-1].strip()
    nums = _NUMBER.findall(text)
    return nums[-1] if nums else None


class CalcEnv(ToolEnv):
    family = "math"
    description = "Multi-turn arithmetic with a calculator tool; oracle available."
    max_turns = 4

    def __init__(
        self,
        n_operands: int = 3,
        max_value: int = 99,
        min_value: int = 2,
        ops: str = "+-*",
        system_prompt: str | None = None,
        max_turns: int | None = None,
        tools: bool = True,
    ) -> None:
        # tools=False: the same questions with no calculator (the no-tool baseline).
        super().__init__(ToolSet.of(calculator) if tools else ToolSet(), max_turns)
        if not 2 <= n_operands <= 6:
            raise ValueError(f"n_operands must be in 2..6, got {n_operands}")
        if not 0 <= min_value <= max_value:
            raise ValueError(f"need 0 <= min_value <= max_value, got {min_value}, {max_value}")
        self.n_operands, self.max_value, self.ops = n_operands, max_value, ops
        self.min_value = min_value
        self.system_prompt = system_prompt

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        nums = [
            int(rng.integers(self.min_value, self.max_value + 1)) for _ in range(self.n_operands)
        ]
        ops = [str(rng.choice(list(self.ops))) for _ in range(self.n_operands - 1)]
        expr = str(nums[0]) + "".join(f" {o} {n}" for o, n in zip(ops, nums[1:], strict=True))
        msgs = [Message("user", f"What is {expr}?")]
        if self.system_prompt:
            msgs.insert(0, Message("system", self.system_prompt))
        return Task(msgs, answer=format_number(evaluate(expr)), info={"expression": expr})

    def score(self, final: Message) -> float:
        assert self.task is not None
        got = extract_answer(final.content)
        return 1.0 if got is not None and got == self.task.answer else 0.0

    def oracle_action(self) -> Message | None:
        if self.task is None:
            return None
        if self.turn == 0:
            call = ToolCall("calculator", {"expression": self.task.info["expression"]}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"The answer is {self.task.answer}.")
