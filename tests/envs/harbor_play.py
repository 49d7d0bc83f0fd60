"""Playing a Harbor env in tests: a bash tool call, and the task's oracle to the end."""

from __future__ import annotations

from typing import Any

from agentrl.types import Message, ToolCall


def bash(command: str) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall("bash", {"command": command}, id="c")])


def play_oracle(env: Any) -> tuple[float, dict[str, Any]]:
    """The oracle's actions from the current reset to the episode's end: (total reward, the
    last step's info). None of its steps may be truncated."""
    total, done, info = 0.0, False, {}
    while not done:
        action = env.oracle_action()
        assert action is not None
        _, reward, done, truncated, info = env.step(action)
        total += reward
        assert not truncated
    return total, info
