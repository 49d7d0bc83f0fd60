"""Math envs: math-verify wiring, verl-format datasets, and real episodes."""

from __future__ import annotations

import json
import threading
from fractions import Fraction
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentrl.envs import check_env, make
from agentrl.envs.math import verify
from agentrl.envs.math.boxed import BoxedMathEnv
from agentrl.envs.math.calc import parse_number
from agentrl.envs.math.verify import is_equivalent
from agentrl.rows import read_dataset
from agentrl.types import Message


def load_math_dataset(path: Path) -> list:
    """Rows read as the boxed env reads them: each one's task."""
    return [BoxedMathEnv.read_row(r) for r in read_dataset(path, check=BoxedMathEnv.read_row).rows]


EQUIVALENT = [
    ("\\frac{1}{2}", "0.5"),
    ("The answer is $\\boxed{0.5}$.", "\\frac{1}{2}"),
    ("\\boxed{x=2}", "2"),
    ("So $\\boxed{[1,2)}$", "[1,2)"),
    ("[1,2)", "[1,2)"),
    ("\\boxed{\\{3, 1, 2\\}}", "\\{1,2,3\\}"),
    ("\\boxed{-7/3}", "-\\frac{7}{3}"),
    ("\\boxed{\\frac{3}{4}}", "0.75"),
    ("The final answer is 42", 42),
]
DIFFERENT = [
    ("\\boxed{3}", "4"),
    ("\\boxed{[1,2]}", "[1,2)"),
    ("\\boxed{(1,2)}", "[1,2)"),
    ("\\boxed{\\{1,3\\}}", "\\{1,2,3\\}"),
    ("\\boxed{0.333}", "\\frac{1}{3}"),
    ("I am not sure.", "2"),
    ("", "2"),
]


@pytest.mark.parametrize(("pred", "gold"), EQUIVALENT)
def test_equivalent(pred: str, gold: str) -> None:
    assert is_equivalent(pred, gold)


@pytest.mark.parametrize(("pred", "gold"), DIFFERENT)
def test_not_equivalent(pred: str, gold: str) -> None:
    assert not is_equivalent(pred, gold)


def test_verify_works_off_the_main_thread() -> None:
    # math-verify's default timeouts use signal.alarm, which raises in worker threads.
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(is_equivalent("\\boxed{0.5}", "\\frac12")))
    t.start()
    t.join()
    assert out == [True]


def _rows() -> list[dict]:
    return [
        {
            "prompt": [{"role": "user", "content": "What is 1/2 + 1/4?"}],
            "reward_model": {"ground_truth": "\\frac{3}{4}"},
            "data_source": "toy",
        },
        {
            "prompt": [{"role": "user", "content": "Solve x + 1 = 3."}],
            "reward_model": {"ground_truth": "2"},
            "data_source": "toy",
        },
    ]


def test_string_prompt(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "Solve x + 1 = 3.", "reward_model": {"ground_truth": 2}}))
    (task,) = load_math_dataset(path)
    assert task.messages == [Message("user", "Solve x + 1 = 3.")] and task.answer == "2"


def test_boxed_env_on_jsonl_and_parquet(tmp_path: Path) -> None:
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in _rows()))
    pq.write_table(pa.Table.from_pylist(_rows()), tmp_path / "d.parquet")
    for path in (jsonl, tmp_path / "d.parquet"):
        env = make("math/boxed-v0", data_path=str(path))
        obs, info = env.reset(options={"index": 0})
        assert obs.messages[0].content == "What is 1/2 + 1/4?" and info["data_source"] == "toy"
        assert env.step(Message("assistant", "It is \\boxed{0.75}"))[1:3] == (1.0, True)
        env.reset(options={"index": 1})
        assert env.step(Message("assistant", "\\boxed{3}"))[1] == 0.0
        check_env(env)


@pytest.mark.parametrize(
    ("row", "why"),
    [
        ({"prompt": "hi"}, "column 'reward_model.ground_truth': missing"),
        ({"prompt": [], "reward_model": {"ground_truth": "1"}}, "column 'prompt': expected chat"),
        (
            {"prompt": [{"role": "bot", "content": "x"}], "reward_model": {"ground_truth": "1"}},
            "column 'prompt': message 0: needs a role",
        ),
        (
            {"prompt": "hi", "reward_model": {"ground_truth": None}},
            "column 'reward_model.ground_truth': missing",
        ),
        (
            {"prompt": "hi", "reward_model": {"ground_truth": [1]}},
            "column 'reward_model.ground_truth': expected a",
        ),
    ],
)
def test_bad_row_names_its_number(tmp_path: Path, row: dict, why: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [*_rows(), row]))
    with pytest.raises(ValueError, match=f"bad.jsonl: row 3: {why}"):
        load_math_dataset(path)


def test_bad_json_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(_rows()[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match="row 2: not valid JSON"):
        load_math_dataset(path)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_generated_problems_are_solvable(level: int) -> None:
    env = make("math/boxed-v0", level=level)
    check_env(env, seeds=tuple(range(12)))


def test_word_problem_episode() -> None:
    env = make("math/word-hard-v0")
    obs, info = env.reset(seed=5)
    assert [t["function"]["name"] for t in obs.tools] == ["calculator"]
    obs, reward, done, _, _ = env.step(env.oracle_action())
    assert not done and obs.messages[0].role == "tool"
    assert obs.messages[0].content == env.task.answer
    assert env.step(Message("assistant", f"About {env.task.answer}1 dollars"))[1] == 0.0
    env.reset(seed=5)
    assert env.step(Message("assistant", f"\\boxed{{{env.task.answer}}}"))[1] == 1.0


# Answers whose evaluation is a computation of hours (sympy evaluates what it parses). Scoring
# runs on the rollout thread, where math-verify's own signal timeouts are off, so only the
# worker process's kill bounds them.
HUGE = ["\\boxed{9^{9^{9}}}", "\\boxed{(10^{7})!}"]


@pytest.mark.parametrize("answer", HUGE)
def test_huge_answer_scores_0_off_the_main_thread(
    answer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify, "TIMEOUT_S", 0.5)  # the kill, not math-verify's 5 s, ends it
    env = make("math/boxed-v0")
    env.reset(seed=0)
    out: list[float] = []
    t = threading.Thread(target=lambda: out.append(env.step(Message("assistant", answer))[1]))
    t.start()
    t.join(timeout=120)  # a guard against the old hang, not a timing assertion
    assert out == [0.0]
    env.reset(seed=0)  # the killed worker is replaced: a right answer still scores 1
    assert env.step(env.oracle_action())[1] == 1.0


def test_verify_from_many_threads() -> None:
    cases = EQUIVALENT + DIFFERENT
    want = [True] * len(EQUIVALENT) + [False] * len(DIFFERENT)
    got: dict[int, bool] = {}

    def run(i: int) -> None:
        got[i] = is_equivalent(*cases[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [got.get(i) for i in range(len(cases))] == want


def test_calc_huge_exponent_scores_0() -> None:
    # Fraction("1e99999999") builds 10**99999999: scoring hung with no timeout on any thread.
    env = make("math/calc-v0")
    env.reset(seed=0)
    assert env.step(Message("assistant", "\\boxed{1e99999999}"))[1] == 0.0
    env.reset(seed=0)
    assert env.step(Message("assistant", f"\\boxed{{{env.task.answer}.0}}"))[1] == 1.0


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12", Fraction(12)),
        (" -7 ", Fraction(-7)),
        ("12.50", Fraction(25, 2)),
        (".5", Fraction(1, 2)),
        ("3/4", Fraction(3, 4)),
        ("1.5e3", Fraction(1500)),
        ("1_000", Fraction(1000)),
        ("1e999", Fraction(10**999)),
        ("1e1000", None),
        ("1e99999999", None),
        ("9" * 401, None),
        ("3/0", None),
        ("\\frac{1}{2}", None),
        ("twelve", None),
        ("", None),
    ],
)
def test_parse_number(text: str, value: Fraction | None) -> None:
    assert parse_number(text) == value
