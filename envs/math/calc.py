"""`math/calc-v0`: multi-turn arithmetic with a calculator tool.

* Observation: a user question "What is 37 * 48 + 12?"; tool results as `tool` messages. Or a
  dataset row (`data.path`): its `prompt` verbatim or its `question`, with a numeric answer.
* Tools: `calculator(expression)` (exact, parsed, never `eval`).
* Reward: 1.0 if the final message's answer equals the exact value, else 0.0. The answer is
  read from `\\boxed{...}` if present, else the last number in the message (thousands
  separators ignored), and compared as a number (`12.0` == `12`). Only a plain number of
  bounded size is read (`parse_number`): `\\boxed{1e99999999}` would otherwise make
  `Fraction` build a hundred-million-digit integer and hang scoring; it scores 0 at once.
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

from ..core import ResumableToolEnv, Task

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_MAX_NUMBER_CHARS = 400
# The numbers `Fraction` reads, but with an exponent of at most three digits: `1e999` is
# cheap, `1e99999999` makes `Fraction` build 10**99999999 (minutes, holding the GIL).
_PLAIN_NUMBER = re.compile(
    r"[-+]?(?:\d[\d_]*\s*/\s*\d[\d_]*|(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:[eE][-+]?\d{1,3})?)"
)


def parse_number(text: str) -> Fraction | None:
    """The exact value of a plain number (`12`, `-0.5`, `3/4`, `1.5e3`), else None.

    Anything longer than `_MAX_NUMBER_CHARS`, with an exponent over three digits, or not a
    number at all is None without any big-integer work, so scoring stays instant.
    """
    text = text.strip()
    if len(text) > _MAX_NUMBER_CHARS or not _PLAIN_NUMBER.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):  # e.g. "1__0", "3/0"
        return None


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
    value = parse_number(got) if got is not None else None  # a boxed "\\frac{..}", text: None
    return float(value is not None and value == parse_number(gold))


def read_numeric_row(row: Row, template: str) -> Task:
    """A dataset row for the calculator envs: a question and a numeric ground truth."""
    gold = row.answer_text().replace(",", "").strip()
    if parse_number(gold) is None:
        raise RowError(
            row.column("answer"),
            f"expected a number, got {gold[:60]!r} (math/boxed-v0 verifies LaTeX answers)",
        )
    return Task(row.task_messages(template), answer=gold, info=row.info())


class CalcEnv(ResumableToolEnv):
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
