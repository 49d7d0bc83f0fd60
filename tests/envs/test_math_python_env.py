"""math/python-v0 and the `python` tool: state per episode, isolation between episodes."""

from __future__ import annotations

import pytest

from agentrl.envs import make
from agentrl.tools.python import PythonTools
from agentrl.types import Message, ToolCall


def run(code: str) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall("python", {"code": code}, id="c")])


@pytest.fixture(scope="module", autouse=True)
def _needs_sandbox() -> None:
    tools = PythonTools()
    out = tools.python("print(6 * 7)")
    tools.close()
    if out.strip() != "42":
        pytest.skip(f"local sandbox unavailable here: {out[:200]}")


def test_episode_state_persists_then_resets() -> None:
    env = make("math/python-v0", timeout_s=1.0)
    obs, _ = env.reset(seed=0)
    assert [t["function"]["name"] for t in obs.tools] == ["python"]
    assert env.step(run("x = 20"))[0].messages[0].content == "(no output)"
    out, reward, done, _, _ = env.step(run("x + 22"))
    assert out.messages[0].content == "42" and not done and reward == 0.0
    assert "ZeroDivisionError" in env.step(run("1/0"))[0].messages[0].content
    assert "[timeout]" in env.step(run("while True: pass"))[0].messages[0].content
    env.reset(seed=0)
    assert "NameError" in env.step(run("x"))[0].messages[0].content
    final = env.step(Message("assistant", f"\\boxed{{{env.task.answer}}}"))
    assert final[1:3] == (1.0, True)
    env.close()
