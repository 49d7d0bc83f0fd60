"""A LangGraph ReAct agent (`create_react_agent` over `langchain_openai.ChatOpenAI`) with a
calculator tool, trained unchanged by agentrl.

    agentrl train --agent examples.harness.langgraph_calc:solve --env math/calc-easy-v0
    agentrl train --agent examples.harness.langgraph_calc:solve_responses --env math/calc-easy-v0

(in `.venv-harness`, from the repository root, so `examples.harness` imports). `solve` talks
Chat Completions, `solve_responses` the Responses API (`ChatOpenAI(use_responses_api=True)`).
Each is `fn(task, base_url)`: the trainer points `base_url` at its recording gateway, one
session per episode; nothing here knows about agentrl.

`bind_tools(..., strict=True)` sends `additionalProperties: false`: an untrained model, forced
into a call, may otherwise add argument keys until `max_tokens` and never close it.

The model is picked per turn (LangGraph's dynamic model): until the calculator has run, the
tools are bound with `tool_choice="required"`, then with `auto`, so the model computes first
and answers after. The gateway enforces `required` by sampling under a grammar, so even an
untrained model calls the tool.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import create_react_agent
from pydantic import BaseModel, Field

from examples.harness.arithmetic import EXPRESSION, evaluate


class CalculatorArgs(BaseModel):
    expression: str = Field(
        pattern=EXPRESSION, max_length=32, description='The expression, e.g. "12 + 30 * 2".'
    )


@tool(args_schema=CalculatorArgs)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression over integers with +, - and *."""
    return evaluate(expression)


def calc_graph(llm: ChatOpenAI) -> CompiledStateGraph[Any, Any, Any, Any]:
    def pick_model(
        state: dict[str, Any], runtime: Any
    ) -> Runnable[LanguageModelInput, BaseMessage]:
        computed = any(isinstance(m, ToolMessage) for m in state["messages"])
        choice = "auto" if computed else "required"
        return llm.bind_tools(
            [calculator], tool_choice=choice, parallel_tool_calls=False, strict=True
        )

    prompt = "Compute with the calculator tool, then reply with the number only."
    return create_react_agent(pick_model, [calculator], prompt=prompt)


async def run(task: dict[str, Any], llm: ChatOpenAI) -> str:
    try:
        out = await calc_graph(llm).ainvoke(
            {"messages": [("user", task["prompt"])]}, {"recursion_limit": 8}
        )
    except GraphRecursionError:
        return ""  # it kept calling tools: no answer
    return str(out["messages"][-1].text)


def chat_model(base_url: str, api_key: str, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="policy", base_url=base_url, api_key=api_key, max_tokens=128, max_retries=0, **kw
    )


async def solve(task: dict[str, Any], base_url: str, api_key: str = "unused") -> str:
    return await run(task, chat_model(base_url, api_key))


async def solve_responses(task: dict[str, Any], base_url: str, api_key: str = "unused") -> str:
    return await run(task, chat_model(base_url, api_key, use_responses_api=True))
