"""`test/parity-v0`: reward 1 when the final answer has an even number of characters.

A random-init model gets it right about half the time, so SPPO sees groups with both winners
and losers without any training first. Oracle: answer "ok"."""

from __future__ import annotations

from agentrl.envs import Task, ToolEnv, register, registry
from agentrl.tools import ToolSet
from agentrl.tools.calculator import calculator
from agentrl.types import Message


class ParityEnv(ToolEnv):
    description = "Answer with an even number of characters."

    def __init__(self) -> None:
        super().__init__(ToolSet.of(calculator), max_turns=2)

    def new_task(self, rng, options):  # noqa: ANN001, ANN201 - ToolEnv hook
        return Task([Message("user", f"Say something even ({int(rng.integers(100))}).")], answer="")

    def score(self, final: Message) -> float:
        return float(len(final.content) % 2 == 0)

    def oracle_action(self) -> Message:
        return Message("assistant", "ok")


if "test/parity-v0" not in registry:
    register("test/parity-v0", ParityEnv)
