"""agentrl ids in Gymnasium's own registry: `gymnasium.make`, its wrappers and vector envs."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

import agentrl.envs
from agentrl.envs import Observation
from agentrl.types import Message, ToolCall


def test_every_agentrl_id_is_in_gymnasiums_registry() -> None:
    ids = {s.id for s in agentrl.envs.all_specs()}
    assert ids <= set(gym.registry), sorted(ids - set(gym.registry))[:5]


def test_gymnasium_make_with_time_limit_and_episode_statistics() -> None:
    env = gym.wrappers.RecordEpisodeStatistics(
        gym.make("math/calc-v0", max_episode_steps=2, max_turns=8)
    )
    assert isinstance(env.unwrapped, agentrl.envs.ToolEnv)
    assert env.spec is not None and env.spec.max_episode_steps == 2
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, Observation) and obs.tools[0]["function"]["name"] == "calculator"
    call = Message("assistant", "", tool_calls=[ToolCall("calculator", {"expression": "1+1"})])
    _, _, terminated, truncated, _ = env.step(call)
    assert (terminated, truncated) == (False, False)
    _, reward, terminated, truncated, info = env.step(call)
    assert (terminated, truncated) == (False, True)  # Gymnasium's TimeLimit, not max_turns
    assert info["episode"]["l"] == 2 and info["episode"]["r"] == reward


def test_gymnasium_make_solves_with_the_oracle_and_module_prefix_form() -> None:
    env = gym.make("agentrl.envs:math/calc-v0")
    env.reset(seed=3)
    action = env.unwrapped.oracle_action()
    total, done = 0.0, False
    while not done:
        _, r, terminated, truncated, _ = env.step(action)
        total, done = total + r, terminated or truncated
        action = env.unwrapped.oracle_action() if not done else None
    assert total == 1.0


def test_sync_vector_env_batches_observations_and_actions() -> None:
    envs = gym.make_vec("games/guess-number-v0", num_envs=2, vectorization_mode="sync")
    obs, _ = envs.reset(seed=0)
    assert len(obs) == 2 and all(isinstance(o, Observation) for o in obs)
    moves = tuple(
        Message("assistant", "", tool_calls=[ToolCall("act", {"action": 50}, id="c")]) for _ in obs
    )
    obs, rewards, terminated, truncated, _ = envs.step(moves)
    assert len(obs) == 2 and rewards.shape == (2,) and terminated.shape == (2,)
    assert all(o.messages[0].role == "tool" and "Error" not in o.messages[0].content for o in obs)
    envs.close()


def test_gym_text_env_without_ansi_render_falls_back_to_repr() -> None:
    """Blackjack-v1 renders only human/rgb_array: asking it for ANSI would warn and then fail
    at the first render, so its state is shown as `repr(obs)`."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env = agentrl.envs.make("games/gym-v0", env="Blackjack-v1", reward_range=(-1.0, 1.0))
        obs, _ = env.reset(seed=0)
    assert env.env.render_mode is None
    assert obs.messages[0].content.endswith(repr(env.last_obs))
    stick = Message("assistant", "", tool_calls=[ToolCall("act", {"action": 0}, id="c")])
    out, reward, terminated, _, _ = env.step(stick)
    assert terminated and reward in (-1.0, 0.0, 1.0) and "Game over." in out.messages[0].content


@pytest.mark.parametrize("gym_id", ["FrozenLake-v1", "CliffWalking-v1"])
def test_gym_text_env_keeps_ansi_where_supported(gym_id: str) -> None:
    env = agentrl.envs.make("games/gym-v0", env=gym_id, reward_range=(-100.0, 1.0))
    obs, _ = env.reset(seed=0)
    assert env.env.render_mode == "ansi" and "(" not in obs.messages[0].content.splitlines()[-1]


def test_async_vector_env_runs_envs_in_subprocesses() -> None:
    """Gymnasium's AsyncVectorEnv pickles the entry point and compares the workers' spaces
    (by value); text observations cannot live in shared memory, so it is turned off."""
    envs = gym.make_vec(
        "games/guess-number-v0",
        num_envs=2,
        vectorization_mode="async",
        vector_kwargs={"shared_memory": False},
    )
    try:
        obs, _ = envs.reset(seed=0)
        assert all(isinstance(o, Observation) for o in obs)
        move = Message("assistant", "", tool_calls=[ToolCall("act", {"action": 50}, id="c")])
        obs, rewards, *_ = envs.step((move, move))
        assert rewards.shape == (2,) and all("50:" in o.messages[0].content for o in obs)
    finally:
        envs.close()
