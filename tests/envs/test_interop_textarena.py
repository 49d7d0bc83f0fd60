"""`textarena:` ids: TextArena's own GuessTheNumber-v0 played through the adapter."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("textarena", reason="needs textarena: pip install 'agentrl[textarena]'")

import agentrl.envs as envs  # noqa: E402
from agentrl.cli import main  # noqa: E402
from agentrl.types import Message  # noqa: E402


def test_envs_check_accepts_a_textarena_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs", "check", "textarena:GuessTheNumber-v0"]) == 0
    assert "PASS textarena:GuessTheNumber-v0" in capsys.readouterr().out


def test_binary_search_wins_the_game_and_the_games_reward_is_the_reward() -> None:
    env = envs.make("textarena:GuessTheNumber-v0")
    obs, _ = env.reset(seed=5)
    prompt = obs.messages[0].content
    lo, hi = (int(x) for x in re.search(r"between (\d+) and (\d+)", prompt).groups())
    total, done, turns = 0.0, False, 0
    while not done:
        guess = (lo + hi) // 2
        obs, reward, done, truncated, info = env.step(Message("assistant", f"I guess [{guess}]"))
        total, turns = total + reward, turns + 1
        text = obs.messages[0].content if obs.messages else ""
        assert "[GAME] You are Player 0" not in text  # only what the move added is sent
        if "higher" in text:
            lo = guess + 1
        elif "lower" in text:
            hi = guess - 1
        assert not truncated and turns < 10
    assert total == 1.0 and "guessed the correct number" in obs.messages[0].content


def test_unknown_textarena_id_is_one_clear_error() -> None:
    with pytest.raises(Exception, match="NoSuchGame-v0"):
        envs.make("textarena:NoSuchGame-v0")


def test_train_env_flag_builds_the_adapter() -> None:
    """`agentrl train --env textarena:...` resolves through the same lookup (measured end to
    end by hand: two GRPO steps on the tiny model, see docs/interop.md)."""
    from agentrl.assembly import env_factory
    from agentrl.cli import build_parser
    from agentrl.cli.train import resolve_config
    from agentrl.envs.interop.textarena_env import TextArenaEnv

    args = build_parser().parse_args(["train", "--env", "textarena:GuessTheNumber-v0"])
    env = env_factory(resolve_config(args))()
    assert isinstance(env, TextArenaEnv) and env.spec_id == "textarena:GuessTheNumber-v0"
