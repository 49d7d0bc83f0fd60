"""`math/word-v0`: multi-turn arithmetic word problems with a calculator tool.

* Observation: a short story problem ("Sam buys 7 notebooks at $4 each and pays with a $50
  bill. How much change does he get?"); calculator results come back as `tool` messages. Or
  a dataset row (`data.path`, e.g. GSM8K): its `prompt` verbatim, or its `question` plus the
  calculator hint, with a numeric answer.
* Tools: `calculator(expression)` (exact, parsed, never `eval`).
* Reward: 1.0 if the final answer (last `\\boxed{}`, else last number; thousands separators
  ignored) equals the exact value, else 0.0.
* Termination: a message without tool calls ends the episode; `max_turns` truncates.
* Difficulty: `level` 1 (one operation), 2 (two), 3 (three, incl. an exact division); `scale`
  multiplies number ranges.
* Oracle: call the calculator on the template's expression, then answer with the result
  (dataset rows have no expression, so no oracle).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agentrl.rows import Row
from agentrl.tools import ToolSet
from agentrl.tools.calculator import calculator, evaluate, format_number
from agentrl.types import Message, ToolCall

from ..core import ResumableToolEnv, Task
from .calc import numeric_match, read_numeric_row

HINT = " Use the calculator; give the final number."

# (story, expression) templates per level; `{name}` fields are filled from ranges in _sample.
TEMPLATES: dict[int, list[tuple[str, str]]] = {
    1: [
        ("Maya has {a} marbles and wins {b} more. How many marbles does she have now?", "{a}+{b}"),
        ("A box holds {a} pencils. How many pencils are in {b} boxes?", "{a}*{b}"),
        ("A library had {c} books and lent out {a}. How many books are left?", "{c}-{a}"),
    ],
    2: [
        (
            "Sam buys {a} notebooks at ${b} each and pays with a ${c} bill. "
            "How much change does he get?",
            "{c}-{a}*{b}",
        ),
        (
            "A train runs at {a} km per hour for {b} hours, then {c} km more. "
            "How many km does it travel?",
            "{a}*{b}+{c}",
        ),
    ],
    3: [
        (
            "An orchard has {a} rows of {b} trees. Each tree gives {d} kg of apples and {c} kg "
            "spoil in total. The rest sells at ${e} per kg. How many dollars does it earn?",
            "({a}*{b}*{d}-{c})*{e}",
        ),
        (
            "{a} friends split a ${m} bill equally, and each also pays ${e} for parking. "
            "How many dollars does each friend pay?",
            "{m}/{a}+{e}",
        ),
    ],
}


def _sample(rng: np.random.Generator, scale: int) -> dict[str, int]:
    def r(lo: int, hi: int) -> int:
        return int(rng.integers(lo, hi * scale + 1))

    a, b, d, e = r(2, 12), r(2, 12), r(2, 9), r(2, 9)
    # c exceeds any product above so subtractions stay positive; m is a multiple of a.
    return {"a": a, "b": b, "c": a * b * d + r(1, 50), "d": d, "e": e, "m": a * r(5, 40)}


class WordProblemEnv(ResumableToolEnv):
    family = "math"
    description = "Arithmetic word problems with a calculator tool; oracle available."
    max_turns = 4
    accepts_rows = True

    def __init__(self, level: int = 1, scale: int = 1, max_turns: int | None = None) -> None:
        super().__init__(ToolSet.of(calculator), max_turns)
        if level not in TEMPLATES:
            raise ValueError(f"level must be one of {sorted(TEMPLATES)}, got {level}")
        self.level, self.scale = level, scale

    @classmethod
    def read_row(cls, row: Row) -> Task:
        return read_numeric_row(row, "{question}" + HINT)

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if "row" in options:
            return self.read_row(options["row"])
        story, expr = TEMPLATES[self.level][int(rng.integers(len(TEMPLATES[self.level])))]
        values = _sample(rng, self.scale)
        expr = expr.format(**values)
        prompt = story.format(**values) + HINT
        answer = format_number(evaluate(expr))
        return Task([Message("user", prompt)], answer=answer, info={"expression": expr})

    def score(self, final: Message) -> float:
        assert self.task is not None
        return numeric_match(final.content, self.task.answer)

    def oracle_action(self) -> Message | None:
        if self.task is None or "expression" not in self.task.info:
            return None
        if self.turn == 0:
            call = ToolCall("calculator", {"expression": self.task.info["expression"]}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"The answer is \\boxed{{{self.task.answer}}}.")
