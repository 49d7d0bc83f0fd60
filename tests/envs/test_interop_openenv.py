"""`openenv:` ids: OpenEnv Environments defined with openenv-core's API, run in-process."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("openenv.core", reason="needs openenv-core: pip install 'agentrl[openenv]'")

import agentrl.envs as envs  # noqa: E402

from agentrl.cli import main  # noqa: E402
from agentrl.types import Message, ToolCall  # noqa: E402

FIXTURES = Path(__file__).parent / "interop_fixtures"


@pytest.fixture(autouse=True)
def _fixtures_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def _act(name: str, **args: object) -> Message:
    return Message("assistant", "", tool_calls=[ToolCall(name, dict(args), id="c")])


def test_action_class_becomes_the_act_tool_and_the_rubric_the_reward() -> None:
    env = envs.make("openenv:openenv_guess:GuessEnvironment", high=8)
    obs, _ = env.reset(seed=1)
    (schema,) = obs.tools
    assert schema["function"]["name"] == "act"
    assert schema["function"]["description"] == "Guess the secret number."
    assert list(schema["function"]["parameters"]["properties"]) == ["guess"]  # no metadata
    lo, hi, total, done = 1, 8, 0.0, False
    while not done:
        guess = (lo + hi) // 2
        out, reward, done, truncated, _ = env.step(_act("act", guess=guess))
        total += reward
        hint = out.messages[0].content
        lo, hi = (guess + 1, hi) if hint == "higher" else (lo, guess - 1)
        assert not truncated
    assert total == 1.0 and hint == "correct"


def test_bad_actions_are_error_observations() -> None:
    env = envs.make("openenv:openenv_guess:GuessEnvironment")
    env.reset(seed=0)
    out, reward, done, _, info = env.step(_act("act", guess="seven"))
    assert "invalid arguments" in out.messages[0].content and not done and reward == 0.0
    assert "unknown tool" in env.step(_act("jump"))[0].messages[0].content
    out = env.step(Message("assistant", "I think 3"))[0]
    assert (
        out.messages[0].role == "user" and "call one of the tools (act)" in out.messages[0].content
    )


def test_mcp_environment_tools_are_listed_and_called() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fastmcp's deprecation notes about its own fields
        env = envs.make("openenv:openenv_counter:CounterEnv")
        obs, _ = env.reset(seed=0)
        assert [t["function"]["name"] for t in obs.tools] == ["add"]
        assert obs.tools[0]["function"]["parameters"]["properties"]["n"]["type"] == "integer"
        out = env.step(
            Message(
                "assistant",
                "",
                tool_calls=[ToolCall("add", {"n": 4}, id="a"), ToolCall("add", {"n": 6}, id="b")],
            )
        )[0]
    assert [m.content for m in out.messages] == ["4", "10"]


def test_envs_check_accepts_openenv_ids(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["envs", "check", "openenv:openenv_guess:GuessEnvironment"])
    assert code == 0, capsys.readouterr().out
    with pytest.raises(ValueError, match="module:EnvironmentClass"):
        envs.make("openenv:openenv_guess")
