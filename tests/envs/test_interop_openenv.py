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


def test_running_openenv_server_is_reached_with_openenvs_client() -> None:
    """`openenv:http://...`: the server (openenv-core's own app, in a subprocess on loopback)
    gives the action schema; episodes run over openenv's WebSocket client."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, str(FIXTURES / "openenv_guess_server.py"), str(port)],
        cwd=FIXTURES, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.5)
        env = envs.make(f"openenv:{url}")
        try:
            obs, _ = env.reset(seed=1)
            assert [t["function"]["name"] for t in obs.tools] == ["act"]
            assert list(obs.tools[0]["function"]["parameters"]["properties"]) == ["guess"]
            assert obs.messages[0].content.endswith("Guess a number in 1..8.")
            bad = env.step(_act("act", guess="x"))[0].messages[0].content
            assert bad.startswith("Error:")
            lo, hi, done, total = 1, 8, False, 0.0
            while not done:
                guess = (lo + hi) // 2
                out, reward, done, _, _ = env.step(_act("act", guess=guess))
                total, hint = total + reward, out.messages[0].content
                lo, hi = (guess + 1, hi) if hint == "higher" else (lo, guess - 1)
            assert total == 1.0 and hint == "correct"
        finally:
            env.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
