"""Gymnasium adapter: moves as tool calls or text, rewards passed through, oracles."""

from __future__ import annotations

from agentrl.envs import check_env, make
from agentrl.envs.games.wordle import feedback
from agentrl.types import Message, ToolCall


def act(move: object, id: str = "c") -> Message:
    return Message("assistant", "", tool_calls=[ToolCall("act", {"action": move}, id=id)])


def test_frozenlake_episode_by_name_index_and_text() -> None:
    env = make("games/frozenlake-v0")
    obs, _ = env.reset(seed=0)
    assert obs.messages[0].content.endswith("PFFF\nFHFH\nFFFH\nHFFG")
    out, reward, done, _, _ = env.step(act("down"))
    assert out.messages[0].role == "tool" and out.messages[0].content.startswith("SFFF\nPHFH")
    assert not done and reward == 0.0
    out, reward, done, _, _ = env.step(Message("assistant", "go <action>right</action>"))
    assert out.messages[0].role == "user" and done and reward == 0.0  # a hole


def test_bad_moves_cost_a_turn_but_not_the_game() -> None:
    env = make("games/frozenlake-v0")
    env.reset(seed=0)
    out, _, done, _, _ = env.step(act(7))
    assert out.messages[0].content.startswith("Error: 7 is not a legal move") and not done
    out = env.step(Message("assistant", "hmm"))[0]
    assert out.messages[0].content.startswith("No move found")
    out = env.step(
        Message(
            "assistant",
            "",
            tool_calls=[
                ToolCall("act", {"action": 1}, id="a"),
                ToolCall("act", {"action": 2}, id="b"),
            ],
        )
    )[0]
    assert [m.tool_call_id for m in out.messages] == ["a", "b"]
    assert "one move per turn" in out.messages[1].content
    assert env.turn == 3


def test_guess_number_oracle_wins_within_log2_guesses() -> None:
    env = make("games/guess-number-v0", high=1000)
    env.reset(seed=11)
    for turn in range(1, 11):  # noqa: B007 - read after the loop
        out, reward, done, truncated, _ = env.step(env.oracle_action())
        if done:
            break
        assert not truncated and (
            "higher" in out.messages[0].content or "lower" in out.messages[0].content
        )
    assert done and reward == 1.0 and turn <= 10


def test_wordle_feedback_and_episode() -> None:
    assert feedback("speed", "abide") == "__Y_Y"
    assert feedback("eerie", "there") == "Y_Y_G"
    env = make("games/wordle-v0", words=["crane"])
    env.reset(seed=0)
    assert "__Y_G" not in env.step(act("REACT"))[0].messages[0].content
    assert env.step(act("crane"))[1:3] == (1.0, True)


def test_generic_gymnasium_env_by_id() -> None:
    env = make("games/gym-v0", env="CliffWalking-v1", reward_range=(-100.0, 0.0), max_turns=5)
    obs, _ = env.reset(seed=0)
    assert "[x]" in obs.messages[0].content or "x" in obs.messages[0].content
    _, reward, _, _, _ = env.step(act(0))
    assert reward == -1.0
    report = check_env(env)
    assert report == {"oracle": False, "tools": ["act"], "adversaries": []}
