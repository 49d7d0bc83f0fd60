"""demo/stock-lookup-v0: how many of a part are in stock? A `count` tool knows.

The worked example of docs/write-an-env.md ("Train your own env on CPU"): a complete user
env file, trained with the shipped recipe `configs/my-env-cpu.yaml`:

    agentrl envs check demo/stock-lookup-v0 --env-module examples/stock_lookup.py
    agentrl train --config configs/my-env-cpu.yaml \\
        --env-module examples/stock_lookup.py --env demo/stock-lookup-v0

Why it learns where a vowel counter did not: each episode's shop is drawn afresh (9 parts
numbered 100..999, counts 10..99, all different), so no answer can be guessed (a constant
scores about 1%) and none is in the prompt; the only way to the reward is to call the tool on
the asked part and copy its two-digit result. Copying digits into the call teaches the tiny
model the digit copy it needs for the result. The reward takes exactly one number, so a
message listing many numbers scores 0, and `adversaries()` lets `envs check` prove it.
"""

from __future__ import annotations

import re

from agentrl.envs import Task, ToolEnv, register
from agentrl.tools import ToolSet

from agentrl.types import Message, ToolCall


class StockLookupEnv(ToolEnv):
    description = "Answer how many of a part are in stock, with a `count` tool; oracle."

    def __init__(self, max_turns: int = 3) -> None:
        super().__init__(ToolSet.of(self.count), max_turns)  # a method: it reads the task

    def count(self, part: int) -> int:
        """How many of a part the shop has.

        Args:
            part: the part number, e.g. 482.
        """
        counts = self.task.info["stock"]
        if part not in counts:  # the model sees this error and can try again
            raise ValueError(f"unknown part {part}; the shop has {sorted(counts)}")
        return counts[part]

    def new_task(self, rng, options):
        parts = rng.choice(range(100, 1000), size=9, replace=False)
        counts = rng.choice(range(10, 100), size=9, replace=False)
        stock = {int(p): int(n) for p, n in zip(parts, counts, strict=True)}
        part = int(rng.choice(parts))
        prompt = Message("user", f"How many of part {part} are in stock?")
        return Task([prompt], answer=str(stock[part]), info={"part": part, "stock": stock})

    def score(self, final):  # exactly one number, and it is the count
        return float(re.findall(r"\d+", final.content) == [self.task.answer])

    def oracle_action(self):  # optional: enables `envs check`'s proof and the SFT bootstrap
        if self.turn == 0:
            call = ToolCall("count", {"part": self.task.info["part"]}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"The answer is {self.task.answer}.")

    def adversaries(self):  # optional: ways to game the reward; `envs check` wants 0 for each
        part, stock = self.task.info["part"], self.task.info["stock"]
        other = next(p for p in stock if p != part)
        wrong_part = ToolCall("count", {"part": other}, id="call_0")
        return {
            "every-number": [Message("assistant", " ".join(map(str, range(10, 100))))],
            "echo-part": [Message("assistant", f"The answer is {part}.")],
            "wrong-part": [
                Message("assistant", "", tool_calls=[wrong_part]),
                Message("assistant", f"The answer is {stock[other]}."),
            ],
            "tool-forever": [Message("assistant", "", tool_calls=[wrong_part])] * self.max_turns,
        }


register("demo/stock-lookup-v0", StockLookupEnv)
