"""An OpenAI Agents SDK agent whose calculator takes typed arguments: two integers and an op.

    agentrl train --agent examples.harness.agents_sdk_ops:solve --env math/word-v0

(in `.venv-harness`, from the repository root, so `examples.harness` imports). The tool's
schema is what many real tools look like (`a`, `b` integers, `op` one of three words), not a
free-form expression: for a story problem the model must pick the story's two numbers, their
order and the operation. `fn(task, base_url)`; the trainer points `base_url` at its recording
gateway, one session per episode; nothing here knows about agentrl.

As in `agents_sdk_calc.py`, the first turn asks for a tool call (`tool_choice="required"`,
which the gateway samples under the tool's JSON schema) and the SDK resets it to `auto` once
the tool ran, so the model then answers in text.
"""

from __future__ import annotations

from typing import Any, Literal

from agents import (
    Agent,
    MaxTurnsExceeded,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)  # the SDK would export traces to api.openai.com

OPS = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b}


@function_tool
def calculator(a: int, b: int, op: Literal["add", "subtract", "multiply"]) -> str:
    """Apply one arithmetic operation to two integers.

    Args:
        a: The first number.
        b: The second number.
        op: "add" gives a + b, "subtract" gives a - b, "multiply" gives a * b.
    """
    if max(abs(a), abs(b)) > 10**12:
        return "error: numbers up to 10**12 only"
    return str(OPS[op](a, b))


def ops_agent(model: OpenAIChatCompletionsModel) -> Agent[Any]:
    return Agent(
        name="calculator agent",
        instructions="Compute with the calculator tool, then reply with the number only.",
        model=model,
        tools=[calculator],
        model_settings=ModelSettings(
            tool_choice="required", parallel_tool_calls=False, max_tokens=128
        ),
        reset_tool_choice=True,
    )


async def solve(task: dict[str, Any], base_url: str, api_key: str = "unused") -> str:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    model = OpenAIChatCompletionsModel(model="policy", openai_client=client)
    try:
        result = await Runner.run(ops_agent(model), task["prompt"], max_turns=4)
    except (MaxTurnsExceeded, ModelBehaviorError):  # kept calling tools, or ran out of tokens
        return ""
    return str(result.final_output)
