"""Code rewards: assert lists, HumanEval check(), and stdin/stdout cases."""

from __future__ import annotations

import asyncio

from agentrl.sandboxes.code_reward import ascore_io, score_asserts, score_io

ADD = "def add(a, b):\n    return a + b\n"


def test_assert_list_fraction_and_all(local):
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 5", "while True: pass"]
    res = score_asserts(ADD, tests, timeout_s=1, backend=local)
    assert (res.passed, res.total, res.reward) == (1, 3, 1 / 3)
    assert [t.status for t in res.tests] == ["ok", "error", "timeout"]
    assert "AssertionError" in res.tests[1].detail
    assert score_asserts(ADD, tests, mode="all", timeout_s=1, backend=local).reward == 0.0


def test_humaneval_check(local):
    check = "def check(candidate):\n    assert candidate(2, 3) == 5\n"
    assert score_asserts(ADD, check, entry_point="add", backend=local).all_passed
    bad = "def add(a, b):\n    return None\n"
    assert score_asserts(bad, check, entry_point="add", backend=local).reward == 0.0


def test_io_cases(local):
    code = "n = int(input())\nprint(n * 2)\n"
    cases = [
        {"input": "2\n", "output": "4"},
        {"input": "5", "output": "10\n\n"},
        {"input": "1", "output": "3"},
    ]
    res = score_io(code, cases, backend=local)
    assert (res.passed, res.total) == (2, 3)
    assert "expected" in res.tests[2].detail
    assert asyncio.run(ascore_io(code, cases[:2], mode="all", backend=local)).reward == 1.0


def test_empty_tests_score_zero(local):
    assert score_io("print(1)", [], backend=local).reward == 0.0
