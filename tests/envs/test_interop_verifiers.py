"""`verifiers:` ids: verifiers 0.4 tasksets (written here with its API) scored by their own
reward functions, their Toolset tools served in-process over MCP."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verifiers.v1", reason="needs verifiers: pip install 'verifiers==0.4.0'")

import agentrl.envs as envs  # noqa: E402
from agentrl.cli import main  # noqa: E402
from agentrl.types import Message, ToolCall  # noqa: E402

FIXTURES = Path(__file__).parent / "interop_fixtures"


@pytest.fixture(autouse=True)
def _fixtures_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(FIXTURES))


def test_prompt_and_reward_come_from_the_task() -> None:
    env = envs.make("verifiers:verifiers_add:AddTaskset")
    obs, info = env.reset(seed=0, options={"idx": 1})
    assert [(m.role, m.content) for m in obs.messages] == [
        ("system", "Be terse."),
        ("user", "What is 10 + 7? Reply with the number only."),
    ]
    _, reward, done, truncated, info = env.step(Message("assistant", "17"))
    assert (reward, done, truncated) == (1.0, True, False)
    assert info["rewards"] == {"correct": 1.0} and info["metrics"] == {"turns": 1.0}
    env.reset(seed=0, options={"idx": 1})
    assert env.step(Message("assistant", "18"))[1] == 0.0


def test_toolset_tools_are_served_and_the_episode_scored_after_them() -> None:
    env = envs.make("verifiers:verifiers_add:ToolTaskset")
    try:
        obs, _ = env.reset(seed=0)
        (schema,) = obs.tools
        name = schema["function"]["name"]
        assert name.endswith("add") and schema["function"]["description"] == "Add two integers."
        call = ToolCall(name, {"a": 123, "b": 456}, id="c1")
        out, reward, done, _, _ = env.step(Message("assistant", "", tool_calls=[call]))
        assert out.messages[0].content == "579" and (reward, done) == (0.0, False)
        bad = env.step(Message("assistant", "", tool_calls=[ToolCall(name, {"a": "x"}, id="c2")]))
        assert "invalid arguments" in bad[0].messages[0].content
        _, reward, done, _, info = env.step(Message("assistant", "579"))
        assert (reward, done) == (1.0, True) and info["metrics"] == {"turns": 3.0}
    finally:
        env.close()


def test_max_turns_truncates_and_still_scores() -> None:
    env = envs.make("verifiers:verifiers_add:ToolTaskset", max_turns=1)
    try:
        obs, _ = env.reset(seed=0)
        call = ToolCall(obs.tools[0]["function"]["name"], {"a": 1, "b": 2}, id="c")
        _, reward, done, truncated, info = env.step(Message("assistant", "", tool_calls=[call]))
        assert (done, truncated, reward) == (False, True, 0.0) and "correct" in info["rewards"]
    finally:
        env.close()


def test_envs_check_accepts_verifiers_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "check", "verifiers:verifiers_add:AddTaskset"]) == 0
    assert "PASS" in capsys.readouterr().out
    with pytest.raises(TypeError, match="not a vf.Taskset"):
        envs.make("verifiers:pathlib:Path")


def test_taskset_ids_and_vf_envs_resolve_through_verifiers_own_loader() -> None:
    """`verifiers:ID` loads a taskset package the way `vf-eval ID` does; a `vf.Env` gives
    its taskset (its `run()`, the harness side, is what agentrl's policy replaces)."""
    import verifiers.v1 as vf

    from agentrl.envs.interop.verifiers_env import VerifiersEnv

    assert len(envs.make("verifiers:verifiers_add_pkg").tasks) == 2
    venv = vf.SingleAgentEnv(vf.SingleAgentEnvConfig(taskset={"id": "verifiers_add_pkg"}))
    env = VerifiersEnv(venv)
    env.reset(seed=0, options={"idx": 0})
    assert env.step(Message("assistant", "5"))[1] == 1.0
