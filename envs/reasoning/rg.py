"""`rg/<dataset>-v0`: any reasoning-gym procedural dataset as a single-turn agentrl env.

reasoning-gym (https://github.com/open-thought/reasoning-gym) has 100+ generators, each with
its own verifier; this adapter turns one into an env by name, so its difficulty configs and
scoring are used unchanged.

* Observation: the dataset's question, plus an instruction to answer in `<answer>` tags. Or
  a dataset row (`data.path`): its `question` the same way (else its `prompt` verbatim), its
  ground truth as the entry's answer and its `metadata` (else `extra_info.metadata`) as the
  entry's metadata, scored by the verifier of the reasoning-gym dataset the row names
  (`metadata.source_dataset`, else `data_source`), else of the env's `dataset`.
* Tools: none.
* Reward: the dataset's own `score_answer(answer, entry)` in [0, 1] on the text inside the
  last `<answer>...</answer>` (else the whole message); a verifier that raises scores 0.
  With `binary=True` the reward is 1.0 only where that score is 1.0, else 0.0: many
  verifiers pay partial credit for non-answers (word_sorting gives >= 0.2 to the question's
  own unsorted word list; the default verifier `len(gold) / len(answer)` to any answer that
  contains the gold, e.g. `420` for `42`), which a policy learns to collect instead of
  solving the task. Every registered `rg/<dataset>-v0` id sets it (docs/envs.md says why);
  `rg/any-v0` leaves it off (the upstream score), `make("rg/any-v0", ..., binary=True)`.
* Termination: the first assistant message ends the episode.
* Difficulty: `config`, the dataset's config fields (e.g. `{"min_terms": 4}` for
  chain_sum), passed to `reasoning_gym.create_dataset`; `dataset_seed` picks the instances.
* Oracle: answer the entry's gold `answer`; datasets whose entries have no single gold answer
  (e.g. propositional_logic) have no oracle.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from agentrl.rows import Row, RowError
from agentrl.tools.ast_lock import AST_LOCK
from agentrl.types import Message

from ..core import Task, ToolEnv

INSTRUCTION = "Think it through, then give only your final answer inside <answer></answer>."
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_SIZE = 1_000_000  # entries are generated on demand from (dataset_seed + index): size is free


class ReasoningGymEnv(ToolEnv):
    family = "reasoning"
    description = "A reasoning-gym dataset scored by its own verifier."
    max_turns = 1
    accepts_rows = True
    row_fields = ("metadata",)

    def __init__(
        self,
        dataset: str = "basic_arithmetic",
        config: dict[str, Any] | None = None,
        dataset_seed: int = 0,
        system_prompt: str | None = None,
        binary: bool = False,
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
        self.binary = binary
        self.entry: dict[str, Any] = {}
        self.verify: Any = None  # a row's own dataset's verifier, when it names one

    @classmethod
    def read_row(cls, row: Row) -> Task:
        import reasoning_gym.factory as factory

        meta = row.get("metadata", None)
        if meta is None:
            meta = row.extra_info.get("metadata", {})
        if not isinstance(meta, dict):
            raise RowError(row.column("metadata"), f"expected a mapping, got {meta!r:.60}")
        name = meta.get("source_dataset") or row.data_source or None
        if name not in factory.DATASETS:
            if "source_dataset" in meta:
                raise RowError(row.column("metadata"), f"unknown reasoning-gym dataset {name!r}")
            name = None  # e.g. data_source "openai/gsm8k": the env's own verifier scores it
        gold = row.answer_text() if row.has("answer") else None
        msgs = row.task_messages(f"{{question}}\n\n{INSTRUCTION}", prefer="question")
        info = {"verifier": name, "question": row.question_text(), "metadata": meta, **row.info()}
        return Task(msgs, answer=gold, info=info)

    def new_task(self, rng: np.random.Generator, options: dict[str, Any]) -> Task:
        if "row" in options:
            task = self.read_row(options["row"])
            info = task.info
            self.entry = {"question": info["question"], "answer": task.answer}
            self.entry["metadata"] = info["metadata"]
            self.verify = _score_fn(info["verifier"]) if info["verifier"] else None
        else:
            index = int(options.get("index", rng.integers(_SIZE)))
            with AST_LOCK:  # generators may build sympy expressions (see agentrl.tools.ast_lock)
                entry = self.data[index]
            msgs = [Message("user", f"{entry['question']}\n\n{INSTRUCTION}")]
            self.entry = entry  # the verifier needs the whole entry (metadata), not the gold
            self.verify = None
            info = {"dataset": self.dataset_name, "index": index}
            task = Task(msgs, answer=entry["answer"], info=info)
        if self.system_prompt:
            task.messages.insert(0, Message("system", self.system_prompt))
        return task

    def score(self, final: Message) -> float:
        assert self.task is not None
        found = _ANSWER.findall(final.content)
        answer = (found[-1] if found else final.content).strip()
        verify = self.verify or self.data.score_answer
        try:
            # Verifiers may parse with sympy; a parse racing another thread's would raise,
            # and a right answer would score 0 here (agentrl.tools.ast_lock).
            with AST_LOCK:
                value = float(verify(answer, entry=self.entry))
        except Exception:  # noqa: BLE001 - a verifier bug on odd output must not end training
            return 0.0
        if self.binary:  # a full score, up to float rounding (per-item sums such as 9 * 1/9)
            return 1.0 if value >= 1.0 - 1e-9 else 0.0
        return min(max(value, 0.0), 1.0)

    def oracle_action(self) -> Message | None:
        if self.task is None or self.task.answer is None:
            return None
        return Message("assistant", f"<answer>{self.task.answer}</answer>")


@functools.lru_cache(maxsize=64)
def _score_fn(name: str) -> Any:
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(name)
