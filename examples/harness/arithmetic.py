"""The calculator the harness examples give their agents: +, -, * over integers, parsed with
`ast` (never `eval`), so a model's arguments cannot run code. Plain user code: no agentrl."""

from __future__ import annotations

import ast
import operator

# What the tool accepts, as its JSON schema says it (a `pattern`): digits, spaces, + - * and
# parentheses.
EXPRESSION = r"^[0-9 +*()-]+$"
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate(expression: str) -> str:
    """The value of `expression`, or `error: ...` (which the model sees as the tool's result)."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("only integers with + - * are supported")

    try:
        return str(value(ast.parse(expression.strip(), mode="eval").body))
    except (ValueError, SyntaxError, RecursionError) as e:
        return f"error: {e}"
