"""An OpenAI Agents SDK agent with a calculator tool, trained unchanged by agentrl.

    agentrl train --agent examples.harness.agents_sdk_calc:solve --env math/calc-easy-v0
    agentrl train --agent examples.harness.agents_sdk_calc:solve_responses --env math/calc-easy-v0

(in `.venv-harness`, from the repository root, so `examples.harness` imports). `solve` talks
Chat Completions (`OpenAIChatCompletionsModel`), `solve_responses` the Responses API
(`OpenAIResponsesModel`, the SDK's default model class). Each is `fn(task, base_url)`: the trainer points `base_url` at
its recording gateway, one session per episode; nothing here knows about agentrl.

The first turn asks for a tool call (`tool_choice="required"`); the SDK resets it to `auto`
once the tool ran (`reset_tool_choice`), so the model then answers in text. The gateway
enforces `required` by sampling under a grammar, so even an untrained model calls the tool.
"""

from __future__ import annotations

from typing import Annotated, Any

from agents import (
    Agent,
    MaxTurnsExceeded,
    Model,
    ModelBehaviorError,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import Field

from examples.harness.arithmetic import EXPRESSION, evaluate

set_tracing_disabled(True)  # the SDK would export traces to api.openai.com


@function_tool
def calculator(expression: Annotated[str, Field(pattern=EXPRESSION, max_length=32)]) -> str:
    """Evaluate an arithmetic expression over integers with +, - and *.

    Args:
        expression: The expression, e.g. "12 + 30 * 2".
    """
    return evaluate(expression)


def calc_agent(model: Model) -> Agent[Any]:
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


async def run(task: dict[str, Any], model: Model) -> str:
    try:
        result = await Runner.run(calc_agent(model), task["prompt"], max_turns=4)
    except (MaxTurnsExceeded, ModelBehaviorError):
        # It kept calling tools, or a turn ran out of tokens (the Responses API reports
        # `status: incomplete`, which the SDK raises): no answer, so reward 0.
        return ""
    return str(result.final_output)


async def solve(task: dict[str, Any], base_url: str, api_key: str = "unused") -> str:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return await run(task, OpenAIChatCompletionsModel(model="policy", openai_client=client))


async def solve_responses(task: dict[str, Any], base_url: str, api_key: str = "unused") -> str:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    return await run(task, OpenAIResponsesModel(model="policy", openai_client=client))
