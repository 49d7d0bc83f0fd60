"""A calculator tool: exact arithmetic on a parsed expression tree (never `eval`)."""

from __future__ import annotations

import ast
import operator
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


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (right.denominator != 1 or abs(right) > _MAX_POW):
            raise ValueError("exponent must be an integer with |exponent| <= 64")
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
            raise ZeroDivisionError("division by zero")
        return Fraction(_BINOPS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported syntax: {ast.dump(node)[:60]}")


def evaluate(expression: str) -> Fraction:
    """Exact value of an arithmetic expression (+ - * / // % ** and parentheses)."""
    if len(expression) > _MAX_CHARS:
        raise ValueError(f"expression longer than {_MAX_CHARS} characters")
    return _eval(parse(expression.replace("^", "**"), mode="eval"))


def format_number(x: Fraction) -> str:
    """Integers as integers, other values as a short decimal."""
    if x.denominator == 1:
        return str(x.numerator)
    return f"{float(x):.6g}"


@tool(timeout_s=2.0)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly.

    Args:
        expression: Arithmetic using + - * / // % ** and parentheses, e.g. "(3+4)*12".
    """
    return format_number(evaluate(expression))
