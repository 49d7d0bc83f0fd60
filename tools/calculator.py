"""A calculator tool: exact arithmetic on a parsed expression tree (never `eval`).

Every value is bounded to `MAX_BITS` (numerator and denominator), checked before a power is
computed and after every operation. The tool's timeout cannot stop a runaway computation:
one big-integer multiply holds the GIL, so the event loop that would fire the timeout waits
for it (`(((9**64)**64)**64)**64` took ~30 s). Refusing oversized values keeps each step to
microseconds, and the model gets a clear error instead.
"""

from __future__ import annotations

import ast
import decimal
import operator
import sys
from collections.abc import Callable
from fractions import Fraction

from .ast_lock import parse
from .core import tool

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Fraction], Fraction]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_MAX_CHARS = 200
_MAX_POW = 64
MAX_BITS = 4096
"""The largest numerator or denominator the calculator computes (about 1233 digits)."""


def _bits(x: Fraction) -> int:
    return max(x.numerator.bit_length(), x.denominator.bit_length())


def _bounded(x: Fraction) -> Fraction:
    if _bits(x) > MAX_BITS:
        raise ValueError(f"result too large (over {MAX_BITS} bits)")
    return x


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        value = node.value
        return _bounded(Fraction(str(value)) if isinstance(value, float) else Fraction(value))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > _MAX_POW:
                raise ValueError("exponent must be an integer with |exponent| <= 64")
            if _bits(left) * abs(right.numerator) > MAX_BITS:  # the power's size bound, unbuilt
                raise ValueError(f"result too large (over {MAX_BITS} bits)")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ZeroDivisionError("division by zero")
        return _bounded(Fraction(_BINOPS[type(node.op)](left, right)))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported syntax: {ast.dump(node)[:60]}")


def evaluate(expression: str) -> Fraction:
    """Exact value of an arithmetic expression (+ - * / // % ** and parentheses)."""
    if len(expression) > _MAX_CHARS:
        raise ValueError(f"expression longer than {_MAX_CHARS} characters")
    return _eval(parse(expression.replace("^", "**"), mode="eval"))


def format_number(x: Fraction) -> str:
    """Integers as integers, other values as a short decimal (6 significant digits). One
    beyond a float's range (up to `MAX_BITS`) is rounded as a `Decimal` instead: a float
    would raise OverflowError, or show a tiny value as 0."""
    if x.denominator == 1:
        return str(x.numerator)
    try:
        approx = float(x)  # 0.0 below a float's range (x is not 0 here)
    except OverflowError:
        approx = 0.0
    if abs(approx) >= sys.float_info.min:  # a subnormal float keeps too few digits
        return f"{approx:.6g}"
    ctx = decimal.Context(prec=6)  # its exponent range covers MAX_BITS
    return f"{ctx.divide(decimal.Decimal(x.numerator), x.denominator).normalize(ctx):g}"


@tool(timeout_s=2.0)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Arithmetic using + - * / // % ** and parentheses, e.g. "(3+4)*12".
    """
    return format_number(evaluate(expression))
