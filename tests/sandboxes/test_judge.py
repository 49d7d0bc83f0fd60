"""The judge (``sandboxes/_judge.py``): tests run beside the candidate, not inside it.

Why: the judge must keep every honest test shape working (HumanEval helpers from the prompt,
LiveCodeBench's ``Solution().method``, numpy results, expected exceptions, generators, stdlib
modules the tests forget to import) while the candidate reaches none of the tests' state and
none of the judge's comparisons. Each case runs on every backend.
"""

from __future__ import annotations

from agentrl.sandboxes import ExecRequest, run_many
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
        "import collections, decimal, enum, fractions\n"
        "class Color(enum.IntEnum):\n    RED = 1\n"
        "Point = collections.namedtuple('Point', 'x y')\n"
        "def stdlib_values():\n    return (fractions.Fraction(1, 3), decimal.Decimal('0.5'),\n"
        "            collections.deque([1]), range(3), bytearray(b'a'), Color.RED,\n"
        "            Point(1, 2), collections.OrderedDict(a=1), {'k': 1}.keys())\n"
    )
    tests = [
        "assert Solution().twice(21) == 42",
        "assert math.isclose(root(2.0), 2 ** 0.5)",  # math: imported by the judge itself
        "assert pairs(3) == {0: (0, []), 1: (1, [1]), 2: (2, [2, 2])}",
        "assert list(count(3)) == [0, 1, 2]",
        "try:\n    strict(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\n"
        "else:\n    raise AssertionError('no error')",
        "assert big() == (7 ** 5000, float('inf'), b'\\x00\\xff', 1 + 2j, frozenset({1}))",
        "from collections import deque\nfrom decimal import Decimal\nfrom fractions import Fraction\n"
        "assert stdlib_values() == (Fraction(1, 3), Decimal('0.5'), deque([1]), range(3),\n"
        "    bytearray(b'a'), 1, (1, 2), {'a': 1}, {'k'})",
        "assert root.__name__ == 'root'",
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
        "import sys\n"
        "def add(*a):\n    return 0\n"
        "_f = sys._getframe(1)\n_g, _wr = _f.f_globals, _f.f_locals['wr']\n"
        "_real, _n = _g['_send'], [0]\n"
        "_hx = lambda t: t.encode().hex()\n"
        "_real(_wr, ['ready'], True)\n"
        "_real(_wr, ['ok', ['d', [[['s', _hx('add')], ['r', 0]], [['s', _hx('abs')], ['r', 0]]]]], True)\n"
        # drop the real player's own 'ready' and names reply, so the forged ones line up
        "def _quiet(fd, msg, player=False):\n    _n[0] += 1\n    if _n[0] > 2:\n"
        "        _real(fd, msg, player)\n"
        "_g['_send'] = _quiet\n"
    )
    res = score_asserts(code, ["assert abs(add(1, 2) - 3) < 1e-9"], backend=backend)
    assert res.reward == 0.0, res.tests


SCRIPT = (
    "def test_add():\n    assert add(1, 2) == 3\n\nif __name__ == '__main__':\n    test_add()\n"
)
UNITTEST = (
    "import unittest\n\nclass T(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
    "if __name__ == '__main__':\n    unittest.main()\n"
)


def test_test_scripts_run_their_main_block_and_must_call_the_candidate(backend):
    right, wrong = "def add(a, b):\n    return a + b\n", "def add(a, b):\n    return None\n"
    for code, want in ((right, 1.0), (wrong, 0.0), ("pass\n", 0.0)):
        res = score_asserts(code, [SCRIPT, UNITTEST], backend=backend)
        assert res.reward == want, (code, res.tests)
    # Tests that define checks but never call the candidate pass nothing.
    res = score_asserts(right, ["def test_add():\n    assert add(1, 2) == 3\n"], backend=backend)
    assert res.reward == 0.0 and "never called" in res.tests[0].detail


def test_candidate_exceptions_objects_and_names(backend):
    code = (
        "import json\n"
        "class BadInput(ValueError):\n    pass\n"
        "def parse(s):\n    if not s:\n        raise BadInput('empty')\n    return json.loads(s)\n"
        "def decode(b):\n    return b.decode('utf-8')\n"
        "class Stack:\n    def __init__(self):\n        self.items = []\n"
        "    def push(self, x):\n        self.items.append(x)\n"
        "    def __len__(self):\n        return len(self.items)\n"
        "    def __getitem__(self, i):\n        return self.items[i]\n"
        "    def __contains__(self, x):\n        return x in self.items\n"
        "    def __str__(self):\n        return f'Stack{self.items}'\n"
        "def statistics(xs):\n    return sum(xs) / len(xs)\n"  # named like a stdlib module
    )
    raises = "try:\n    {call}\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\n"
    tests = [
        raises.format(call="parse('')"),  # a subclass of ValueError
        raises.format(call="parse('{')"),  # json.JSONDecodeError
        raises.format(call="decode(b'\\xff')"),  # UnicodeDecodeError (5-argument constructor)
        "s = Stack()\ns.push(1)\ns.push(2)\n"
        "assert len(s) == 2 and s[-1] == 2 and 1 in s and str(s) == 'Stack[1, 2]'",
        "assert statistics([1, 2, 3]) == 2",
    ]
    res = score_asserts(code, tests, entry_point="statistics", backend=backend)
    assert res.reward == 1.0, [(t.name[:30], t.detail) for t in res.tests]


def test_prompt_helpers_run_before_the_candidates_code(backend):
    """HumanEval's own harness runs prompt + completion: an answer that leaves out the
    prompt's helpers still finds them."""
    support = "def double(x):\n    return 2 * x\n\ndef quad(x):\n    '''Twice double.'''\n"
    check = "def check(candidate):\n    assert candidate(3) == 12\n"
    answer = "def quad(x):\n    return double(double(x))\n"
    res = score_asserts(answer, check, entry_point="quad", support=support, backend=backend)
    assert res.reward == 1.0, res.tests


def test_a_judge_killed_by_its_cpu_limit_is_a_timeout_and_the_next_run_is_its_own(backend):
    """On the local backend the judge is the run's init (pid 1 of the run's namespace, which
    ignores SIGXCPU): its hard CPU limit kills it mid-run, and the zygote reports that death.
    The result is the run's own (a timeout, no verdict), and the next run on the same backend
    reads its own reply, not a stale one."""
    code = "def f(x):\n    return x\n"
    spin = ExecRequest(
        code, timeout_s=60, cpu_time_s=1, check="f(1)\nwhile True:\n    pass\n", remote=("f",)
    )
    honest = ExecRequest(code, check="assert f(2) == 2\n", remote=("f",))
    spun, after = run_many([spin, honest], backend=backend, concurrency=1)
    assert spun.status == "timeout" and spun.verified is False, (spun.status, spun.stderr[-300:])
    assert after.status == "ok" and after.verified is True, (after.status, after.stderr[-300:])
