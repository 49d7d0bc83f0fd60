"""A dataset row poses the episode in every env family that takes rows: the row's prompt (or
its question in the env's instruction) is what the model sees, and the reward is checked
against the row's ground truth: right answers earn the maximum, wrong ones do not."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from gsm8k_like import SUFFIX, TRAIN, verl_rows

from agentrl.envs import make
from agentrl.rows import DatasetError, Row, RowError, read_dataset
from agentrl.types import Message

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="the local sandbox needs root and bubblewrap (scripts/setup-sandbox.sh)",
)


def episode(env_id: str, row: Row, answer: str, **kwargs: object) -> tuple[list[Message], float]:
    env = make(env_id, **kwargs)
    try:
        obs, info = env.reset(seed=row.index, options={"row": row})
        assert info["row"] == row.number
        return obs.messages, env.step(Message("assistant", answer))[1]
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["math/boxed-v0", "math/calc-v0", "math/word-v0"])
def test_math_envs_pose_the_verl_prompt_and_score_its_ground_truth(env_id: str) -> None:
    row = Row(verl_rows(TRAIN)[3])
    msgs, right = episode(env_id, row, "Step by step ... #### 131")
    assert [m.content for m in msgs] == [TRAIN[3][0] + SUFFIX]  # verbatim, no env template
    assert right == 1.0
    assert episode(env_id, row, "#### 130")[1] == 0.0


def test_math_question_rows_get_the_env_instruction() -> None:
    row = Row({"question": "What is 6 * 7?", "answer": "42"})
    msgs, _ = episode("math/word-v0", row, "42")
    assert msgs[0].content == "What is 6 * 7? Use the calculator; give the final number."
    msgs, reward = episode("math/boxed-v0", row, "\\boxed{42}", system_prompt="Be brief.")
    assert [m.role for m in msgs] == ["system", "user"] and reward == 1.0
    with pytest.raises(RowError, match="column 'answer': expected a number"):
        make("math/calc-v0").read_row(Row({"question": "q", "answer": "\\frac{1}{2}"}))


def test_python_math_env_takes_rows() -> None:
    env = make("math/python-v0")
    try:
        obs, _ = env.reset(seed=0, options={"row": Row(verl_rows(TRAIN)[0])})
        assert obs.messages[0].content == TRAIN[0][0] + SUFFIX
        assert [t["function"]["name"] for t in obs.tools] == ["python"]
        assert env.step(Message("assistant", "\\boxed{72}"))[1] == 1.0
    finally:
        env.close()


@needs_sandbox
def test_code_rows_bring_their_own_tests(tmp_path: Path) -> None:
    asserts = ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]
    verl = {
        "data_source": "mine",
        "prompt": [{"role": "user", "content": "Write add(a, b) in a ```python block."}],
        "reward_model": {"ground_truth": json.dumps(asserts)},
    }
    msgs, right = episode(
        "code/functions-v0", Row(verl), "```python\ndef add(a, b):\n    return a + b\n```"
    )
    assert msgs[0].content == "Write add(a, b) in a ```python block." and right == 1.0
    wrong = "```python\ndef add(a, b):\n    return a + b if a < 0 else 0\n```"
    assert episode("code/functions-v0", Row(verl), wrong)[1] == 0.5  # add(-1, 1) passes
    stdio = {
        "question": "Print the sum of two integers.",
        "answer": {"inputs": ["1 2\n"], "outputs": ["3\n"]},
    }
    msgs, right = episode(
        "code/stdio-v0", Row(stdio), "```python\nprint(sum(map(int, input().split())))\n```"
    )
    assert msgs[0].content.startswith("Print the sum of two integers.\n\nWrite a Python program")
    assert right == 1.0


def test_code_row_errors_name_the_tests_column(tmp_path: Path) -> None:
    from agentrl.envs.code.env import CodeEnv

    path = tmp_path / "code.jsonl"
    path.write_text(json.dumps({"prompt": "p", "reward_model": {"ground_truth": "{oops"}}) + "\n")
    with pytest.raises(DatasetError, match="row 1: column 'reward_model.ground_truth': tests text"):
        read_dataset(path, check=CodeEnv.read_row)


def test_search_rows_pose_the_question_and_accept_any_gold() -> None:
    pytest.importorskip("bm25s")
    from agentrl.envs.search.corpus import Corpus

    item = Corpus(30, seed=0).question(__import__("numpy").random.default_rng(0), 1)
    search_r1 = {  # Search-R1's parquet layout: a question column and {target: [...]}
        "question": item.question,
        "prompt": [{"role": "user", "content": "Search-R1's own <search> instructions ..."}],
        "reward_model": {"ground_truth": {"target": ["nope", item.answer]}},
    }
    env = make("search/qa-v0")
    try:
        obs, _ = env.reset(seed=0, options={"row": Row(search_r1)})
        assert item.question in obs.messages[0].content and "<answer>" in obs.messages[0].content
        env.step(env.oracle_action())  # searches the row's question in the synthetic corpus
        assert env.step(Message("assistant", f"<answer>{item.answer}</answer>"))[1] == 1.0
    finally:
        env.close()
    assert episode("search/qa-v0", Row(search_r1), "<answer>wrong</answer>")[1] == 0.0


def test_reasoning_gym_rows_are_scored_by_the_named_dataset() -> None:
    rg = pytest.importorskip("reasoning_gym")
    entry = rg.create_dataset("chain_sum", size=1, seed=5)[0]
    row = Row(json.loads(json.dumps(entry)))  # as exported to JSONL: question/answer/metadata
    # rg/spell_backward-v0's own verifier could not score this; the row names chain_sum.
    msgs, right = episode("rg/spell_backward-v0", row, f"<answer>{entry['answer']}</answer>")
    assert msgs[0].content.startswith(entry["question"]) and right == 1.0
    assert episode("rg/spell_backward-v0", row, "<answer>12345</answer>")[1] == 0.0
    with pytest.raises(RowError, match="column 'metadata': unknown reasoning-gym dataset"):
        make("rg/any-v0").read_row(Row({"question": "q", "metadata": {"source_dataset": "x"}}))


def test_a_custom_env_takes_rows_by_declaring_it() -> None:
    from agentrl.envs import Task, ToolEnv

    class Echo(ToolEnv):
        accepts_rows = True

        @classmethod
        def read_row(cls, row: Row) -> Task:
            return Task(row.task_messages(), answer=row.answer_text())

        def new_task(self, rng, options):
            return self.read_row(options["row"])

        def score(self, final: Message) -> float:
            return float(final.content == self.task.answer)

    env = Echo()
    obs, _ = env.reset(options={"row": Row({"prompt": "say hi", "answer": "hi"})})
    assert obs.messages[0].content == "say hi" and env.step(Message("assistant", "hi"))[1] == 1.0
