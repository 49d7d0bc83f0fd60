"""demo/count-vowels-v0: count the vowels of a made-up word; a `count_vowels` tool helps.

The worked example of docs/write-an-env.md ("Train your own env on CPU"): a complete user
env file, trained with the shipped recipe `configs/my-env-cpu.yaml`:

    agentrl envs check demo/count-vowels-v0 --env-module examples/count_vowels.py
    agentrl train --config configs/my-env-cpu.yaml \\
        --env-module examples/count_vowels.py --env demo/count-vowels-v0

Why a tool: a small model cannot count letters it sees as sub-word tokens, but it can copy
the word into a tool call and copy the tool's answer back. Guessing the count scores
at most 38.8% (always "1"); calling the tool, every time. That gap is what RL should close;
measured with the shipped recipe it does not yet (docs/write-an-env.md has the numbers).
"""

from __future__ import annotations

import re

from agentrl.envs import Task, ToolEnv, register
from agentrl.tools import ToolSet, tool
from agentrl.types import Message, ToolCall

VOWELS = "aeiou"
LETTERS = "abcdefghijklmnopqrstuvwxyz"


@tool(timeout_s=2)
def count_vowels(text: str) -> int:
    """Count the vowels (a, e, i, o, u) in a text.

    Args:
        text: the text whose vowels to count.
    """
    return sum(c in VOWELS for c in text.lower())


class CountVowelsEnv(ToolEnv):
    description = "Count the vowels of a made-up word with a count_vowels tool; oracle."
    max_turns = 3

    def __init__(self, min_len: int = 4, max_len: int = 8, max_turns: int | None = None) -> None:
        super().__init__(ToolSet.of(count_vowels), max_turns)
        self.min_len, self.max_len = min_len, max_len

    def new_task(self, rng, options):
        n = int(rng.integers(self.min_len, self.max_len + 1))
        word = "".join(rng.choice(list(LETTERS), size=n))
        answer = str(sum(c in VOWELS for c in word))
        prompt = Message("user", f"How many vowels are in '{word}'?")
        return Task([prompt], answer=answer, info={"word": word})

    def score(self, final):
        numbers = re.findall(r"\d+", final.content)
        return float(bool(numbers) and numbers[-1] == self.task.answer)

    def oracle_action(self):  # optional: enables `envs check`'s proof and the SFT bootstrap
        if self.turn == 0:
            call = ToolCall("count_vowels", {"text": self.task.info["word"]}, id="call_0")
            return Message("assistant", "", tool_calls=[call])
        return Message("assistant", f"The answer is {self.task.answer}.")


register("demo/count-vowels-v0", CountVowelsEnv)
