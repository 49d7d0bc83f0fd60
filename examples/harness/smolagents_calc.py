"""A smolagents `ToolCallingAgent` with a calculator tool, as its users write it.

Nothing here knows about agentrl: the agent is pointed at an OpenAI-compatible server by
`OpenAIServerModel(api_base=...)`, the only thing `agentrl train` changes. Train it with

    agentrl train --agent smolagents_calc:solve --env math/calc-easy-v0 trainer.steps=20

(run from this folder, or with it on PYTHONPATH; smolagents: `pip install 'smolagents[openai]'`).
smolagents asks for `tool_choice="required"` on every step, so the served model always
answers with a call of `calculator` or of smolagents' own `final_answer`; the answer
`agent.run` returns is scored by the env's grader.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from smolagents import OpenAIServerModel, ToolCallingAgent, tool

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression over integers (+, -, *).

    Args:
        expression: The expression, e.g. "12 + 7 * 3".
    """

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("only integers with + - * are supported")

    try:
        return str(value(ast.parse(expression, mode="eval").body))
    except (ValueError, SyntaxError, RecursionError) as e:
        return f"error: {e}"


def solve(task: dict[str, Any], base_url: str, max_steps: int = 4, max_tokens: int = 512) -> str:
    """One episode: the task's prompt in, smolagents' final answer out."""
    model = OpenAIServerModel(
        model_id="policy",
        api_base=base_url,
        api_key="unused",  # the gateway takes any key
        client_kwargs={"max_retries": 0, "timeout": 300},
        max_tokens=max_tokens,
    )
    agent = ToolCallingAgent(
        tools=[calculator], model=model, max_steps=max_steps, verbosity_level=0
    )
    return str(agent.run(task["prompt"]))
