"""`math/boxed-v0`: single-turn math answered in `\\boxed{}`, verified with math-verify.

* Observation: the problem as chat messages (the dataset's `prompt`, or a generated problem
  plus an instruction to box the final answer). No tools.
* Reward: 1.0 if the message's final answer is mathematically equal to the ground truth
  (`verify.is_equivalent`: `\\frac{1}{2}` == `0.5`, sets, intervals, equations), else 0.0.
* Termination: the first assistant message ends the episode.
* Data: `data_path` (parquet/JSONL in verl's format, see `dataset.py`; a seed picks the row,
  `options={'index': i}` picks one explicitly), or by default an endless procedurally
  generated set (`problems.py`), so no download is needed.
* Difficulty (generated set only): `level` 1..3 and `kinds` (fraction, linear, percent).
* Oracle: answer `\\boxed{<ground truth>}`; on a file dataset this also proves every gold
  answer the seeds reach parses and verifies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agentrl.types import Message

from ..core import Task, ToolEnv
from .dataset import MathRow, load_math_dataset
from .problems import KINDS, generate
from .verify import is_equivalent


class BoxedMathEnv(ToolEnv):
    family = "math"
    description = "Single-turn math with a \\boxed{} answer checked by math-verify."
    max_turns = 1
    instruction = "Solve the problem. Put your final answer in \\boxed{}."

    def __init__(
        self,
        data_path: str | Path | None = None,
        level: int = 1,
        kinds: tuple[str, ...] | list[str] = KINDS,
        system_prompt: str | None = None,
    ) -> None:
        super().__init__()
        self.rows: list[MathRow] | None = load_math_dataset(data_path) if data_path else None
        self.level, self.kinds = level, tuple(kinds)
        self.system_prompt = system_prompt
        unknown = set(self.kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown problem kinds {sorted(unknown)}; choose from {KINDS}")

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if self.rows is None:
            p = generate(rng, self.level, self.kinds)
            msgs = [Message("user", f"{p['question']}\n\n{self.instruction}")]
            info = {"kind": p["kind"], "level": self.level}
            gold = p["answer"]
        else:
            index = int(options.get("index", rng.integers(len(self.rows))))
            row = self.rows[index]
            msgs, gold, info = list(row.messages), row.ground_truth, {"index": index, **row.extra}
        if self.system_prompt:
            msgs.insert(0, Message("system", self.system_prompt))
        return Task(msgs, answer=gold, info=info)

    def score(self, final: Message) -> float:
        assert self.task is not None
        return 1.0 if is_equivalent(final.content, self.task.answer) else 0.0

    def oracle_action(self) -> Message | None:
        if self.task is None:
            return None
        return Message("assistant", f"The answer is $\\boxed{{{self.task.answer}}}$.")
