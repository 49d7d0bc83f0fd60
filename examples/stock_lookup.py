"""demo/stock-lookup-v0: how many of an item does the shop have? A `count` tool knows.

The worked example of docs/write-an-env.md ("Train your own env on CPU"): a complete user
env file, trained with the shipped recipe `configs/my-env-cpu.yaml`:

    agentrl envs check demo/stock-lookup-v0 --env-module examples/stock_lookup.py
    agentrl train --config configs/my-env-cpu.yaml \\
        --env-module examples/stock_lookup.py --env demo/stock-lookup-v0

Why this task: each episode's stock counts are drawn afresh (10..99, all different), so no
answer can be guessed (a constant scores about 1%) and none is in the prompt; the only way to
the reward is to call the tool on the asked item and copy its two-digit result. The reward
takes exactly one number, so a message listing many numbers scores 0; `adversaries()` lets
`envs check` prove that. The tool's name shares no word with the question or the answer: a
tiny model mixes such words up (named `stock`, its calls came out `{"name": "9 in stock.`).
Measured (docs/write-an-env.md): held-out 1.6% before RL -> 100% after (seed 0; seed 1 did not
learn: 3.1% -> 3.1%); guessing scores about 1%.
"""

from __future__ import annotations

import re

from agentrl.envs import Task, ToolEnv, register
from agentrl.tools import ToolSet
from agentrl.types import Message, ToolCall

ITEMS = ["apples", "books", "chairs", "clocks", "cups", "hats", "kites", "lamps", "pens"]


class StockLookupEnv(ToolEnv):
    description = "Answer how many of an item are in stock, with a `count` tool; oracle."

    def __init__(self, max_turns: int = 3) -> None:
        super().__init__(ToolSet.of(self.count), max_turns)  # a method: it reads the task

    def count(self, item: str) -> int:
        """How many of an item the shop has.

        Args:
            item: the item, e.g. "lamps".
        """
        counts = self.task.info["stock"]
        if item not in counts:  # the model sees this error and can try again
            raise ValueError(f"unknown item {item!r}; the shop sells {', '.join(ITEMS)}")
        return counts[item]

    def new_task(self, rng, options):
        counts = rng.choice(range(10, 100), size=len(ITEMS), replace=False)
        item = str(rng.choice(ITEMS))
        prompt = Message("user", f"How many {item} are in stock?")
        stock = {name: int(n) for name, n in zip(ITEMS, counts, strict=True)}
        return Task([prompt], answer=str(stock[item]), info={"item": item, "stock": stock})

    def score(self, final):  # exactly one number, and it is the count
        return float(re.findall(r"\d+", final.content) == [self.task.answer])

    def oracle_action(self):  # optional: enables `envs check`'s proof and the SFT bootstrap
        if self.turn == 0:
            call = ToolCall("count", {"item": self.task.info["item"]}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"The answer is {self.task.answer}.")

    def adversaries(self):  # optional: ways to game the reward; `envs check` wants 0 for each
        other = next(i for i in ITEMS if i != self.task.info["item"])
        wrong_item = ToolCall("count", {"item": other}, id="call_0")
        return {
            "every-number": [Message("assistant", " ".join(map(str, range(10, 100))))],
            "wrong-item": [
                Message("assistant", "", tool_calls=[wrong_item]),
                Message("assistant", f"The answer is {self.task.info['stock'][other]}."),
            ],
            "tool-forever": [Message("assistant", "", tool_calls=[wrong_item])] * self.max_turns,
        }


register("demo/stock-lookup-v0", StockLookupEnv)
