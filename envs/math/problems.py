"""Procedural math problems with exact LaTeX answers, so math envs need no download.

Three kinds, each with `level` 1 (easy) to 3 (hard):
* `fraction`: add/subtract/multiply fractions; answer a reduced `\\frac{p}{q}`.
* `linear`: solve a linear equation for x; level 3 has x on both sides and fractional roots.
* `percent`: percent of a number, percent change, and undoing a discount.

Answers are computed with `Fraction`, never floats, so the gold is exact.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np

KINDS = ("fraction", "linear", "percent")


def latex(x: Fraction) -> str:
    """`Fraction` as LaTeX: an integer, or a signed `\\frac{p}{q}`."""
    if x.denominator == 1:
        return str(x.numerator)
    sign = "-" if x < 0 else ""
    return f"{sign}\\frac{{{abs(x.numerator)}}}{{{x.denominator}}}"


def _plus(b: int) -> str:
    return f"+ {b}" if b >= 0 else f"- {-b}"


def _int(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def fraction(rng: np.random.Generator, level: int) -> tuple[str, str]:
    max_den = (6, 12, 15)[level - 1]
    n_terms = 2 if level < 3 else 3
    ops = "+" if level == 1 else "+-*"
    terms = [Fraction(_int(rng, 1, max_den - 1), _int(rng, 2, max_den)) for _ in range(n_terms)]
    chosen = [str(rng.choice(list(ops))) for _ in range(n_terms - 1)]
    expr, value = latex(terms[0]), terms[0]
    for i, (op, t) in enumerate(zip(chosen, terms[1:], strict=True)):
        # Left to right, parenthesised so the written order is the computed order.
        sym = "\\cdot" if op == "*" else op
        expr = f"{expr} {sym} {latex(t)}" if i == 0 else f"\\left({expr}\\right) {sym} {latex(t)}"
        value = value * t if op == "*" else value + t if op == "+" else value - t
    return f"Compute ${expr}$. Give the answer as a reduced fraction.", latex(value)


def linear(rng: np.random.Generator, level: int) -> tuple[str, str]:
    x = Fraction(_int(rng, -12, 12))
    a = 1 if level == 1 else _int(rng, 2, 9) * int(rng.choice([-1, 1]))
    b = _int(rng, -20, 20)
    if level < 3:
        coef = "" if a == 1 else str(a)
        return f"Solve for $x$: ${coef}x {_plus(b)} = {a * x + b}$.", latex(x)
    c = _int(rng, 1, 9)
    c += c == a  # keep a != c so the equation has one root
    d = _int(rng, -20, 20)
    root = Fraction(d - b, a - c)
    return f"Solve for $x$: ${a}x {_plus(b)} = {c}x {_plus(d)}$.", latex(root)


def percent(rng: np.random.Generator, level: int) -> tuple[str, str]:
    p = int(rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 60, 75]))
    n = _int(rng, 1, 40) * 20
    if level == 1:
        return f"What is ${p}\\%$ of ${n}$?", latex(Fraction(p * n, 100))
    if level == 2:
        up = bool(rng.integers(2))
        verb, sign = ("rises", 1) if up else ("falls", -1)
        value = Fraction(n) * (1 + sign * Fraction(p, 100))
        return f"A price of ${n}$ {verb} by ${p}\\%$. What is the new price?", latex(value)
    paid = Fraction(n) * (1 - Fraction(p, 100))
    return (
        f"After a ${p}\\%$ discount a jacket costs ${latex(paid)}$. What was the original price?",
        latex(Fraction(n)),
    )


GENERATORS: dict[str, Callable[[np.random.Generator, int], tuple[str, str]]] = {
    "fraction": fraction,
    "linear": linear,
    "percent": percent,
}


def generate(rng: np.random.Generator, level: int, kinds: tuple[str, ...] = KINDS) -> dict:
    """One problem as `{'kind', 'question', 'answer'}`; `answer` is LaTeX."""
    if not 1 <= level <= 3:
        raise ValueError(f"level must be 1, 2 or 3, got {level}")
    kind = str(rng.choice(list(kinds)))
    question, answer = GENERATORS[kind](rng, level)
    return {"kind": kind, "question": question, "answer": answer}
