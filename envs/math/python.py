"""`math/python-v0`: boxed-answer math with a sandboxed Python interpreter tool.

The same problems as `math/boxed-v0` (generated, or a verl-format `data_path`), but over
several turns with a code interpreter, as in tool-integrated reasoning (ToRA, ReTool).

* Observation: the problem and an instruction to use Python and box the answer; interpreter
  output (stdout, tracebacks, limit statuses) comes back as `tool` messages.
* Tools: `python(code)`, one persistent sandboxed interpreter per episode
  (`agentrl.tools.python.PythonTools` over `agentrl.sandboxes.interpreter.PythonSession`).
* Reward: 1.0 if the final message's answer verifies against the ground truth with
  math-verify (`verify.is_equivalent`), else 0.0.
* Termination: a message without tool calls ends the episode; `max_turns` truncates.
* Difficulty: `level` 1..3 and `kinds` (generated set), `max_turns`, `timeout_s` per cell.
* Oracle: runs Python that prints the gold answer, then boxes it only if the interpreter
  printed it: it proves the sandbox round trip and the verifier, not a solution method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.tools.python import PythonTools
from agentrl.types import Message, ToolCall

from ..core import Observation
from .boxed import BoxedMathEnv
from .problems import KINDS


class PythonMathEnv(BoxedMathEnv):
    description = "Math with a sandboxed Python interpreter tool; \\boxed{} answer."
    max_turns = 6
    instruction = (
        "Solve the problem. You can run Python with the python tool (state persists between "
        "calls). Put your final answer in \\boxed{}."
    )

    def __init__(
        self,
        data_path: str | Path | None = None,
        level: int = 2,
        kinds: tuple[str, ...] | list[str] = KINDS,
        max_turns: int | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        super().__init__(data_path, level, kinds)
        self.tools = PythonTools(timeout_s=timeout_s)
        if max_turns is not None:
            self.max_turns = max_turns
        self._printed = ""

    def oracle_action(self) -> Message | None:
        if self.task is None:
            return None
        if self.turn == 0:
            code = f"answer = r'''{self.task.answer}'''\nprint(answer)"
            return Message(
                "assistant", "", tool_calls=[ToolCall("python", {"code": code}, id="c0")]
            )
        shown = self.task.answer if self.task.answer in self._printed else "unknown"
        return Message("assistant", f"The answer is $\\boxed{{{shown}}}$.")

    async def astep(self, action: Message) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        out = await super().astep(action)
        self._printed = "\n".join(m.content for m in out[0].messages)  # for the oracle
        return out
