"""`math/calc-v0`: multi-turn arithmetic with a calculator tool.

* Observation: a user question "What is 37 * 48 + 12?"; tool results as `tool` messages. Or a
  dataset row (`data.path`): its `prompt` verbatim or its `question`, with a numeric answer.
* Tools: `calculator(expression)` (exact, parsed, never `eval`).
* Reward: 1.0 if the final message's answer equals the exact value, else 0.0. The answer is
  read from `\\boxed{...}` if present, else the last number in the message (thousands
  separators ignored), and compared as a number (`12.0` == `12`).
* Termination: a message with no tool call ends the episode; `max_turns` truncates.
* Difficulty: `n_operands` (2..6), `max_value` (operand magnitude), `ops` (subset of "+-*");
  `min_value` (default 2) keeps e.g. `math/calc-mul-v0`'s operands two- or three-digit.
* `tools=False` poses the same questions without the calculator (a no-tool baseline).
* Oracle: call the calculator on the question's expression, then answer with its result
  (dataset rows have no expression, so no oracle).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import numpy as np

from agentrl.rows import Row, RowError
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


def numeric_match(text: str, gold: str) -> float:
    """1.0 if the message's answer equals the gold number exactly (as fractions), else 0.0."""
    got = extract_answer(text.replace(",", ""))
    try:
        return float(got is not None and Fraction(got) == Fraction(gold))
    except (ValueError, ZeroDivisionError):  # e.g. a boxed "\\frac{..}" or text
        return 0.0


def read_numeric_row(row: Row, template: str) -> Task:
    """A dataset row for the calculator envs: a question and a numeric ground truth."""
    gold = row.answer_text().replace(",", "").strip()
    try:
        Fraction(gold)
    except (ValueError, ZeroDivisionError):
        raise RowError(
            row.column("answer"),
            f"expected a number, got {gold[:60]!r} (math/boxed-v0 verifies LaTeX answers)",
        ) from None
    return Task(row.task_messages(template), answer=gold, info=row.info())


class CalcEnv(ToolEnv):
    family = "math"
    description = "Multi-turn arithmetic with a calculator tool; oracle available."
    max_turns = 4
    accepts_rows = True

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

    @classmethod
    def read_row(cls, row: Row) -> Task:
        return read_numeric_row(row, "{question}")

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if "row" in options:
            task = self.read_row(options["row"])
            if self.system_prompt:
                task.messages.insert(0, Message("system", self.system_prompt))
            return task
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
        return numeric_match(final.content, self.task.answer)

    def oracle_action(self) -> Message | None:
        if self.task is None or "expression" not in self.task.info:
            return None
        if self.turn == 0:
            call = ToolCall("calculator", {"expression": self.task.info["expression"]}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"The answer is {self.task.answer}.")
