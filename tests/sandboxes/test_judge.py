"""The judge (``sandboxes/_judge.py``): tests run beside the candidate, not inside it.

Why: the judge must keep every honest test shape working (HumanEval helpers from the prompt,
LiveCodeBench's ``Solution().method``, numpy results, expected exceptions, generators, stdlib
modules the tests forget to import) while the candidate reaches none of the tests' state and
none of the judge's comparisons. Each case runs on every backend.
"""

from __future__ import annotations

from agentrl.sandboxes.code_reward import score_asserts

SUPPORT = (
    "def encode(s: str) -> str:\n    return s[1:] + s[:1]\n\n"
    "def decode(s: str) -> str:\n    '''Undo encode.'''\n"
)
ROUND_TRIP = (
    "import random\n\ndef check(candidate):\n    rng = random.Random(0)\n"
    "    for _ in range(20):\n"
    "        s = ''.join(rng.choice('abc') for _ in range(rng.randint(1, 9)))\n"
    "        assert candidate(encode(s)) == s\n"
)


def test_prompt_helpers_are_the_trusted_ones(backend):
    honest = SUPPORT + "def decode(s):\n    return s[-1:] + s[:-1]\n"
    res = score_asserts(honest, ROUND_TRIP, entry_point="decode", support=SUPPORT, backend=backend)
    assert res.reward == 1.0, res.tests
    # Redefining the helper as the identity makes decode trivial in the candidate's own
    # process; the tests still encode with the prompt's helper.
    cheat = "def encode(s):\n    return s\n\ndef decode(s):\n    return s\n"
    res = score_asserts(cheat, ROUND_TRIP, entry_point="decode", support=SUPPORT, backend=backend)
    assert res.reward == 0.0, res.tests
    # The stub in `support` is never what the tests call.
    res = score_asserts(
        "x = 1\n", ROUND_TRIP, entry_point="decode", support=SUPPORT, backend=backend
    )
    assert res.reward == 0.0


def test_honest_shapes_pass(backend):
    code = (
        "import math\nimport numpy as np\n"
        "class Solution:\n    def twice(self, x):\n        return 2 * x\n"
        "def root(x):\n    return np.float64(math.sqrt(x))\n"
        "def pairs(n):\n    return {i: (i, [i] * i) for i in range(n)}\n"
        "def count(n):\n    yield from range(n)\n"
        "def strict(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n"
        "def big():\n    return 7 ** 5000, float('inf'), b'\\x00\\xff', 1 + 2j, frozenset({1})\n"
    )
    tests = [
        "assert Solution().twice(21) == 42",
        "assert math.isclose(root(2.0), 2 ** 0.5)",  # math: imported by the judge itself
        "assert pairs(3) == {0: (0, []), 1: (1, [1]), 2: (2, [2, 2])}",
        "assert list(count(3)) == [0, 1, 2]",
        "try:\n    strict(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\n"
        "else:\n    raise AssertionError('no error')",
        "assert big() == (7 ** 5000, float('inf'), b'\\x00\\xff', 1 + 2j, frozenset({1}))",
    ]
    res = score_asserts(code, tests, backend=backend)
    assert res.reward == 1.0, [(t.name, t.detail) for t in res.tests]


def test_the_candidate_cannot_read_the_judge(backend):
    code = (
        "import os\n"
        "def probe(what):\n    try:\n"
        "        with open(f'/proc/{os.getppid()}/{what}', 'rb') as f:\n"
        "            f.read(1)\n        return 'read'\n"
        "    except OSError as e:\n        return type(e).__name__\n"
    )
    tests = [f"assert probe({w!r}) != 'read'" for w in ("mem", "environ", "fd/3", "fd/0")]
    res = score_asserts(code, tests, backend=backend)
    assert res.reward == 1.0, [(t.name, t.detail) for t in res.tests]


def test_non_plain_results_never_compare(backend):
    code = "class Box:\n    pass\ndef make():\n    return Box()\n"
    res = score_asserts(
        code, ["assert make() != 1", "assert make()", "assert make() in [1]"], backend=backend
    )
    assert res.passed == 0, res.tests
    assert "not plain data" in res.tests[0].detail


def test_forged_protocol_frames_do_not_rebind_the_judges_names(backend):
    """The player is the candidate's: it may write any frame. A names reply that also binds
    `abs` (to the candidate's `add`, which returns 0) must not reach the tests' `abs`."""
    code = (
        "import json, os, sys\n"
        "def add(*a):\n    return 0\n"
        "def _frame(msg):\n    body = json.dumps(msg).encode()\n"
        "    os.write(14, str(len(body)).encode() + b'\\n' + body)\n"
        "_frame(['ready'])\n"
        "_frame(['ok', ['d', [[['s', 'add'], ['r', 0]], [['s', 'abs'], ['r', 0]]]]])\n"
        # drop the real player's own 'ready' and names reply, so the forged ones line up
        "_g = sys._getframe(1).f_globals\n_real, _n = _g['_send'], [0]\n"
        "def _quiet(fd, msg):\n    _n[0] += 1\n    if _n[0] > 2:\n        _real(fd, msg)\n"
        "_g['_send'] = _quiet\n"
    )
    res = score_asserts(code, ["assert abs(add(1, 2) - 3) < 1e-9"], backend=backend)
    assert res.reward == 0.0, res.tests
