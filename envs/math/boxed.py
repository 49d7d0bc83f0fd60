"""`math/boxed-v0`: single-turn math answered in `\\boxed{}`, verified with math-verify.

* Observation: the problem as chat messages (the dataset's `prompt`, or a generated problem
  plus an instruction to box the final answer). No tools.
* Reward: 1.0 if the message's final answer is mathematically equal to the ground truth
  (`verify.is_equivalent`: `\\frac{1}{2}` == `0.5`, sets, intervals, equations), else 0.0.
* Termination: the first assistant message ends the episode.
* Data: a dataset row (`data.path`, `reset(options={"row": Row})`, docs/datasets.md): its
  `prompt` verbatim, or its `question` plus the boxing instruction, scored against its
  `reward_model.ground_truth` / `answer`. Or `data_path` (the same rows, read by the env: a
  seed picks the row, `options={'index': i}` one explicitly). By default an endless
  procedurally generated set (`problems.py`), so no download is needed.
* Difficulty (generated set only): `level` 1..3 and `kinds` (fraction, linear, percent).
* Oracle: answer `\\boxed{<ground truth>}`; on a file dataset this also proves every gold
  answer the seeds reach parses and verifies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agentrl.rows import Row, read_dataset
from agentrl.types import Message

from ..core import Task, ToolEnv
from ..hidden_data import HiddenData, distinctive
from .problems import KINDS, generate
from .verify import is_equivalent


class BoxedMathEnv(ToolEnv, HiddenData):
    family = "math"
    description = "Single-turn math with a \\boxed{} answer checked by math-verify."
    max_turns = 1
    accepts_rows = True
    instruction = "Solve the problem. Put your final answer in \\boxed{}."

    def __init__(
        self,
        data_path: str | Path | None = None,
        level: int = 1,
        kinds: tuple[str, ...] | list[str] = KINDS,
        system_prompt: str | None = None,
    ) -> None:
        super().__init__()
        self.rows = read_dataset(data_path, check=self.read_row).rows if data_path else None
        self.level, self.kinds = level, tuple(kinds)
        self.system_prompt = system_prompt
        unknown = set(self.kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown problem kinds {sorted(unknown)}; choose from {KINDS}")

    @classmethod
    def read_row(cls, row: Row) -> Task:
        msgs = row.task_messages(f"{{question}}\n\n{cls.instruction}")
        return Task(msgs, answer=row.answer_text(), info=row.info())

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if "row" in options:
            task = self.read_row(options["row"])
        elif self.rows is not None:
            index = int(options.get("index", rng.integers(len(self.rows))))
            task = self.read_row(self.rows[index])
            task.info["index"] = index
        else:
            p = generate(rng, self.level, self.kinds)
            msgs = [Message("user", f"{p['question']}\n\n{self.instruction}")]
            task = Task(msgs, answer=p["answer"], info={"kind": p["kind"], "level": self.level})
        if self.system_prompt:
            task.messages.insert(0, Message("system", self.system_prompt))
        return task

    def score(self, final: Message) -> float:
        assert self.task is not None
        return 1.0 if is_equivalent(final.content, self.task.answer) else 0.0

    def hidden_data(self) -> list[str]:
        assert self.task is not None, "reset() first"
        shown = [m.content for m in self.task.messages]
        return distinctive([str(self.task.answer)], shown, min_chars=16)

    def oracle_action(self) -> Message | None:
        if self.task is None:
            return None
        return Message("assistant", f"The answer is $\\boxed{{{self.task.answer}}}$.")
