"""LangGraph, unchanged (`examples/harness/langgraph_calc.py`: `create_react_agent` over
`langchain_openai.ChatOpenAI`), against the gateway: Chat Completions and the Responses API
(`use_responses_api=True`), invoked plainly and streamed (`stream_mode="messages"` on a
streaming model), each one episode where the model calls the calculator, the graph's tool node
runs it and the session stays token-exact; then `agentrl train --agent ...` on each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="LangGraph is in .venv-harness (scripts/setup-harness.sh)")
pytest.importorskip("langchain_openai", reason="langchain-openai is in .venv-harness")

from langchain_core.messages import AIMessageChunk, ToolMessage  # noqa: E402
from stage_gateway import (  # noqa: E402
    assert_tool_episode_token_exact,
    gateway,
    run_episode,
    train,
)

from examples.harness import langgraph_calc  # noqa: E402

pytestmark = pytest.mark.timeout(900)
__all__ = ["gateway"]  # the module-scoped fixture, used by name


@pytest.mark.parametrize("fn", ["solve", "solve_responses"])
def test_episode_calls_the_tool_token_exact(gateway: Any, fn: str) -> None:
    answer = run_episode(gateway, getattr(langgraph_calc, fn), f"lg-{fn}")
    seg = assert_tool_episode_token_exact(gateway, f"lg-{fn}")
    said = seg.messages[-1]
    assert said.role == "assistant" and answer == said.content


@pytest.mark.parametrize("responses", [False, True])
def test_streamed_graph_calls_the_tool_token_exact(gateway: Any, responses: bool) -> None:
    """The example's graph on a streaming `ChatOpenAI`: LangChain assembles the call from the
    streamed chunks (or Responses events), the tool node runs it, the graph continues."""
    seen: list[str] = []

    async def streamed(task: dict[str, Any], base_url: str) -> None:
        llm = langgraph_calc.chat_model(
            base_url, "unused", streaming=True, use_responses_api=responses
        )
        graph = langgraph_calc.calc_graph(llm)
        inputs = {"messages": [("user", task["prompt"])]}
        config = {"recursion_limit": 8}
        async for message, _ in graph.astream(inputs, config, stream_mode="messages"):
            if isinstance(message, AIMessageChunk) and message.tool_call_chunks:
                seen.append("call")
            elif isinstance(message, ToolMessage):
                seen.append("tool")

    session = f"lg-stream-{'responses' if responses else 'chat'}"
    run_episode(gateway, streamed, session)
    assert "call" in seen and "tool" in seen
    assert_tool_episode_token_exact(gateway, session)


@pytest.mark.parametrize(("fn", "steps"), [("solve", 2), ("solve_responses", 1)])
def test_agentrl_train_agent(
    agentrl_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fn: str, steps: int
) -> None:
    """The documented command, from the repository root: every run trained, none failed."""
    agent = f"examples.harness.langgraph_calc:{fn}"
    train(agent, tmp_path / "run", agentrl_cache, monkeypatch, steps)
