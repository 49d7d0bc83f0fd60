"""The candidate's values are inert in the judge (issue 39, items 2 and 3).

Why: a test's predicate about a returned value (``x in result``, ``result.startswith(...)``,
``assertIn``) must be decided by the judge on plain data it owns, never by asking the
candidate's object, which would answer "yes" to every question; and an exception of the
iteration protocol raised by the candidate (``StopIteration``) must reach the tests as an
ordinary error, not silently end the tests' own loops over ``map``/``filter``. The candidate
has full Python in each case; each case runs on every backend.
"""

from __future__ import annotations

from agentrl.sandboxes.code_reward import score_asserts

# An object that claims every property a test may ask about a value.
YES = (
    "class Yes:\n"
    "    def __contains__(self, x):\n        return True\n"
    "    def __getattr__(self, name):\n        return lambda *a, **k: True\n"
    "    def __iter__(self):\n        return iter(())\n"
    "    def __len__(self):\n        return 0\n"
    "def solve(*args):\n    return Yes()\n"
)


def test_predicates_about_a_result_are_not_the_candidates_to_answer(backend):
    tests = [
        "assert 'needle' in solve('hay')",
        "assert solve('abc').startswith('xy')",
        "assert solve('abc').endswith('c') and solve([1]).issubset({2})",
        "assert solve('3').isdigit()",
        "import unittest\nunittest.TestCase().assertIn(5, solve([1, 2]))",
        "from unittest import TestCase\nTestCase().assertTrue(solve('a').isupper())",
    ]
    res = score_asserts(YES, tests, backend=backend)
    assert res.passed == 0, [(t.name[:40], t.status) for t in res.tests]


def test_membership_still_reads_the_candidates_contents(backend):
    """Honest objects keep working: membership is decided by the judge over the plain items
    the object yields (its ``__iter__``, or ``__getitem__`` from 0)."""
    code = (
        "class Bag:\n    def __init__(self, *xs):\n        self.xs = list(xs)\n"
        "    def __iter__(self):\n        return iter(self.xs)\n"
        "    def add(self, x):\n        self.xs.append(x)\n"
        "def make():\n    return Bag(1, 2)\n"
    )
    tests = ["b = make()\nb.add(3)\nassert 3 in b and 4 not in b and 1 in make()"]
    res = score_asserts(code, tests, backend=backend)
    assert res.reward == 1.0, res.tests


STOP = (
    "class Done(StopIteration):\n    pass\n"
    "def f(x):\n    raise StopIteration\n"
    "def g(x):\n    raise Done('sub')\n"
    "async def h(x):\n    return x\n"
    "def k(x):\n    raise StopAsyncIteration\n"
)


def test_iteration_protocol_exceptions_are_ordinary_errors(backend):
    loops = [
        "def check(c):\n    for r in map(c, [1, 2]):\n        assert r == 99\ncheck({fn})",
        "def check(c):\n    for r in filter(c, [1, 2]):\n        assert False\ncheck({fn})",
        "assert list(map({fn}, [1, 2])) == [99, 99]",
        "import itertools\nassert all(r == 99 for r in itertools.starmap({fn}, [(1,)]))\n{fn}(0)",
    ]
    for fn in ("f", "g", "k"):
        res = score_asserts(STOP, [t.format(fn=fn) for t in loops], backend=backend)
        assert res.passed == 0, (fn, [(t.name[:40], t.status, t.detail) for t in res.tests])
    # Expected exceptions stay catchable as what they are (an ordinary Exception).
    res = score_asserts(
        STOP,
        [
            "try:\n    f(1)\nexcept Exception as e:\n    assert 'StopIteration' in str(e)\n"
            "else:\n    raise AssertionError"
        ],
        backend=backend,
    )
    assert res.reward == 1.0, res.tests


# Never implements encode: looks for the first call's expected value anywhere in its own
# process (every container gc tracks, every frame's locals, raw or hex as the wire sends text),
# by its hash, so the program itself never holds it; decode answers with what it was given.
PEEK = (
    "import gc, hashlib, sys\n"
    "WANT = 'eaa5cd78db4bed11'\n"
    "def _find():\n"
    "    pool = [o for o in gc.get_objects() if isinstance(o, (list, tuple, dict))]\n"
    "    f = sys._getframe()\n"
    "    while f is not None:\n"
    "        pool.append(dict(f.f_locals))\n"
    "        f = f.f_back\n"
    "    for o in pool:\n"
    "        for x in o.values() if isinstance(o, dict) else o:\n"
    "            if not isinstance(x, str):\n"
    "                continue\n"
    "            for text in (x, bytes.fromhex(x).decode('utf-8', 'replace') if len(x) == 10 and\n"
    "                         all(c in '0123456789abcdef' for c in x) else ''):\n"
    "                if hashlib.sha256(text.encode()).hexdigest()[:16] == WANT:\n"
    "                    return text\n"
    "    return ''\n"
    "_seen = []\n"
    "def encode(s, *hint):\n    _seen.append(s)\n    return _find()\n"
    "def decode(s):\n    return _seen[-1] if _seen else ''\n"
)


def test_the_player_learns_an_argument_only_when_the_tests_make_the_call(backend):
    """Asking later calls ahead (one hand-off for many) would hand the player ``"khoor"``, the
    expected value of the first call, before it answers it: a wrong program would pass."""
    tests = 'assert encode("hello") == "khoor"\nassert decode("khoor") == "hello"\n'
    res = score_asserts(PEEK, [tests], backend=backend)
    assert res.passed == 0, [(t.name[:40], t.status, t.detail) for t in res.tests]
    # The probe finds what the player was given: the same value as the call's own argument.
    tests = 'assert encode("hello", "khoor") == "khoor"\nassert decode("khoor") == "hello"\n'
    res = score_asserts(PEEK, [tests], backend=backend)
    assert res.passed == 1, [(t.name[:40], t.status, t.detail) for t in res.tests]
