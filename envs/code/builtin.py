"""Procedurally generated coding problems: no download, unlimited, seeded.

Each template draws parameters (a divisor, a character set, a modulus...) so two seeds rarely
give the same spec, then draws test inputs. Expected outputs come from running *our*
reference solution in-process (trusted code we wrote; model code only ever runs in the
sandbox), so the tests and the oracle cannot disagree. The first two tests are visible.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .problems import CodeProblem

N_TESTS, N_VISIBLE = 6, 2
_ANSWER = "Reply with the code in a ```python block."


def _word(rng: np.random.Generator, lo: int = 1, hi: int = 8) -> str:
    return "".join(rng.choice(list("abcdeilmnorstu"), size=int(rng.integers(lo, hi + 1))))


def _function(
    name: str, spec: str, solution: str, inputs: list[tuple[Any, ...]], pid: str
) -> CodeProblem:
    scope: dict[str, Any] = {}
    exec(solution, scope)  # our reference solution (trusted), never model output
    fn = scope[name]
    tests = [f"assert {name}({', '.join(map(repr, a))}) == {fn(*a)!r}" for a in inputs]
    prompt = f"{spec}\n\nFor example:\n{tests[0]}\n\n{_ANSWER}"
    return CodeProblem(
        pid, prompt, "function", tests, name, solution=solution, visible_tests=tests[:N_VISIBLE]
    )


def sum_multiples(rng: np.random.Generator) -> CodeProblem:
    a, b = sorted(int(x) for x in rng.choice(np.arange(2, 10), size=2, replace=False))
    sol = f"def sum_multiples(n):\n    return sum(i for i in range(n) if i % {a} == 0 or i % {b} == 0)\n"
    spec = (
        "Write a Python function `sum_multiples(n: int) -> int` that returns the sum of all "
        f"integers i with 0 <= i < n that are divisible by {a} or by {b}."
    )
    inputs = [(int(rng.integers(0, 300)),) for _ in range(N_TESTS)]
    return _function("sum_multiples", spec, sol, inputs, f"sum_multiples-{a}-{b}")


def count_chars(rng: np.random.Generator) -> CodeProblem:
    chars = "".join(sorted(set(rng.choice(list("aeioulmnrst"), size=3))))
    sol = f"def count_chars(s):\n    return sum(c in {chars!r} for c in s.lower())\n"
    spec = (
        "Write a Python function `count_chars(s: str) -> int` that returns how many characters "
        f"of s, ignoring case, are one of {', '.join(repr(c) for c in chars)}."
    )
    inputs = [(_word(rng, 0, 12) + _word(rng, 0, 4).upper(),) for _ in range(N_TESTS)]
    return _function("count_chars", spec, sol, inputs, f"count_chars-{chars}")


def rotate(rng: np.random.Generator) -> CodeProblem:
    right = bool(rng.integers(2))
    side, sign = ("right", "-") if right else ("left", "")
    sol = (
        "def rotate(xs, k):\n    if not xs:\n        return []\n"
        f"    k = {sign}k % len(xs)\n    return xs[k:] + xs[:k]\n"
    )
    spec = (
        f"Write a Python function `rotate(xs: list[int], k: int) -> list[int]` that returns xs "
        f"rotated {side} by k positions (k >= 0 may exceed len(xs); an empty list stays empty)."
    )
    inputs = [
        (
            [int(v) for v in rng.integers(-9, 10, size=int(rng.integers(0, 7)))],
            int(rng.integers(0, 9)),
        )
        for _ in range(N_TESTS)
    ]
    return _function("rotate", spec, sol, inputs, f"rotate-{side}")


def run_length(rng: np.random.Generator) -> CodeProblem:
    count_first = bool(rng.integers(2))
    piece = "f'{n}{c}'" if count_first else "f'{c}{n}'"
    sol = (
        "def encode(s):\n    out, i = [], 0\n    while i < len(s):\n        j = i\n"
        "        while j < len(s) and s[j] == s[i]:\n            j += 1\n"
        f"        c, n = s[i], j - i\n        out.append({piece})\n        i = j\n"
        "    return ''.join(out)\n"
    )
    example = "3a1b" if count_first else "a3b1"
    spec = (
        "Write a Python function `encode(s: str) -> str` that run-length encodes s, writing "
        f"each run as {'count then character' if count_first else 'character then count'} "
        f"(so 'aaab' becomes '{example}'; the empty string stays empty)."
    )
    inputs = [
        ("".join(c * int(rng.integers(1, 4)) for c in _word(rng, 0, 5)),) for _ in range(N_TESTS)
    ]
    return _function("encode", spec, sol, inputs, f"encode-{example}")


def recurrence(rng: np.random.Generator) -> CodeProblem:
    c, p, q = (int(rng.integers(0, 5)), int(rng.integers(2, 5)), int(rng.integers(-3, 8)))
    sol = (
        f"def term(n):\n    a = {c}\n    for _ in range(n):\n"
        f"        a = ({p} * a + {q}) % 1_000_007\n    return a\n"
    )
    spec = (
        f"Write a Python function `term(n: int) -> int` for the sequence a(0) = {c}, "
        f"a(k) = ({p} * a(k-1) + {q}) mod 1000007. Return a(n) for 0 <= n <= 10000."
    )
    inputs = [(int(rng.integers(0, 60)),) for _ in range(N_TESTS - 1)] + [(10_000,)]
    return _function("term", spec, sol, inputs, f"term-{c}-{p}-{q}")


def _stdio(spec: str, sol: str, inputs: list[str], pid: str) -> CodeProblem:
    scope: dict[str, Any] = {}
    exec(sol, scope)  # defines solve(text) -> str; trusted reference code
    cases = [{"input": s, "output": scope["solve"](s)} for s in inputs]
    c0 = cases[0]
    prompt = (
        f"{spec}\n\nWrite a complete Python program that reads standard input and prints the "
        f"answer.\n\nExample input:\n{c0['input']}\nExample output:\n{c0['output']}\n{_ANSWER}"
    )
    program = sol + "\nimport sys\nprint(solve(sys.stdin.read()), end='')\n"
    return CodeProblem(
        pid, prompt, "stdio", cases=cases, solution=program, visible_cases=cases[:N_VISIBLE]
    )


def sum_above(rng: np.random.Generator) -> CodeProblem:
    t = int(rng.integers(-5, 20))
    sol = (
        "def solve(text):\n    nums = [int(x) for x in text.split()[1:]]\n"
        f"    return str(sum(x for x in nums if x > {t})) + '\\n'\n"
    )
    spec = (
        "The first line holds N; the second line holds N integers. Print the sum of the "
        f"integers that are greater than {t} (0 if there are none)."
    )
    inputs = []
    for _ in range(N_TESTS):
        nums = [int(v) for v in rng.integers(-30, 60, size=int(rng.integers(1, 9)))]
        inputs.append(f"{len(nums)}\n{' '.join(map(str, nums))}\n")
    return _stdio(spec, sol, inputs, f"sum_above-{t}")


def reverse_words(rng: np.random.Generator) -> CodeProblem:
    sep = str(rng.choice([" ", ",", "-"]))
    sol = f"def solve(text):\n    return {sep!r}.join(reversed(text.split())) + '\\n'\n"
    spec = (
        "Read one line of space-separated words. Print the words in reverse order, joined "
        f"by {sep!r}."
    )
    inputs = [
        " ".join(_word(rng) for _ in range(int(rng.integers(1, 7)))) + "\n" for _ in range(N_TESTS)
    ]
    return _stdio(spec, sol, inputs, f"reverse_words-{sep}")


def power_mod(rng: np.random.Generator) -> CodeProblem:
    m = int(rng.choice([97, 1009, 65537, 1_000_003]))
    sol = (
        "def solve(text):\n    it = iter(text.split())\n    t = int(next(it))\n"
        f"    return ''.join(f'{{pow(int(next(it)), int(next(it)), {m})}}\\n' for _ in range(t))\n"
    )
    spec = (
        "The first line holds T. Each of the next T lines holds two integers a and b "
        f"(0 <= a, b <= 10**18). For each, print a**b mod {m} on its own line."
    )
    inputs = []
    for _ in range(N_TESTS):
        pairs = [(int(rng.integers(0, 10**9)), int(rng.integers(0, 10**9))) for _ in range(3)]
        inputs.append(f"{len(pairs)}\n" + "".join(f"{a} {b}\n" for a, b in pairs))
    return _stdio(spec, sol, inputs, f"power_mod-{m}")


FUNCTION_TEMPLATES: list[Callable[[np.random.Generator], CodeProblem]] = [
    sum_multiples,
    count_chars,
    rotate,
    run_length,
    recurrence,
]
STDIO_TEMPLATES: list[Callable[[np.random.Generator], CodeProblem]] = [
    sum_above,
    reverse_words,
    power_mod,
]


def generate(rng: np.random.Generator, kind: str = "function") -> CodeProblem:
    """One fresh problem; `kind` is "function", "stdio" or "mixed"."""
    pool = {
        "function": FUNCTION_TEMPLATES,
        "stdio": STDIO_TEMPLATES,
        "mixed": FUNCTION_TEMPLATES + STDIO_TEMPLATES,
    }[kind]
    return pool[int(rng.integers(len(pool)))](rng)
