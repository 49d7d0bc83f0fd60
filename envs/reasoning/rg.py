"""`rg/<dataset>-v0`: any reasoning-gym procedural dataset as a single-turn agentrl env.

reasoning-gym (https://github.com/open-thought/reasoning-gym) has 100+ generators, each with
its own verifier; this adapter turns one into an env by name, so its difficulty configs and
scoring are used unchanged.

* Observation: the dataset's question, plus an instruction to answer in `<answer>` tags.
* Tools: none.
* Reward: the dataset's own `score_answer(answer, entry)` in [0, 1] on the text inside the
  last `<answer>...</answer>` (else the whole message); a verifier that raises scores 0.
* Termination: the first assistant message ends the episode.
* Difficulty: `config`, the dataset's config fields (e.g. `{"min_terms": 4}` for
  chain_sum), passed to `reasoning_gym.create_dataset`; `dataset_seed` picks the instances.
* Oracle: answer the entry's gold `answer`; datasets whose entries have no single gold answer
  (e.g. propositional_logic) have no oracle.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from agentrl.types import Message

from ..core import Task, ToolEnv

INSTRUCTION = "Think it through, then give only your final answer inside <answer></answer>."
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_SIZE = 1_000_000  # entries are generated on demand from (dataset_seed + index): size is free


class ReasoningGymEnv(ToolEnv):
    family = "reasoning"
    description = "A reasoning-gym dataset scored by its own verifier."
    max_turns = 1

    def __init__(
        self,
        dataset: str = "basic_arithmetic",
        config: dict[str, Any] | None = None,
        dataset_seed: int = 0,
        system_prompt: str | None = None,
    ) -> None:
        try:
            import reasoning_gym
        except ImportError as e:
            raise ImportError(
                "rg/* envs need reasoning-gym: pip install 'agentrl[reasoning]'"
            ) from e
        super().__init__()
        self.dataset_name = dataset
        self.data = reasoning_gym.create_dataset(
            dataset, size=_SIZE, seed=dataset_seed, **(config or {})
        )
        self.system_prompt = system_prompt
        self.entry: dict[str, Any] = {}

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        index = int(options.get("index", rng.integers(_SIZE)))
        entry = self.data[index]
        msgs = [Message("user", f"{entry['question']}\n\n{INSTRUCTION}")]
        if self.system_prompt:
            msgs.insert(0, Message("system", self.system_prompt))
        self.entry = entry  # the verifier needs the whole entry (metadata), not just the gold
        info = {"dataset": self.dataset_name, "index": index}
        return Task(msgs, answer=entry["answer"], info=info)

    def score(self, final: Message) -> float:
        assert self.task is not None
        found = _ANSWER.findall(final.content)
        answer = (found[-1] if found else final.content).strip()
        try:
            value = float(self.data.score_answer(answer, entry=self.entry))
        except Exception:  # noqa: BLE001 - a verifier bug on odd output must not end training
            return 0.0
        return min(max(value, 0.0), 1.0)

    def oracle_action(self) -> Message | None:
        if self.task is None or self.task.answer is None:
            return None
        return Message("assistant", f"<answer>{self.task.answer}</answer>")
