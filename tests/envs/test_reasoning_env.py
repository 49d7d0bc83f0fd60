"""reasoning-gym adapter: datasets by name, their verifiers as rewards."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym")

from agentrl.envs import check_env, make  # noqa: E402
from agentrl.types import Message  # noqa: E402


def test_episode_scores_with_the_dataset_verifier() -> None:
    env = make("rg/spell_backward-v0")
    obs, info = env.reset(seed=3)
    word = obs.messages[0].content.split(": ")[-1].split("\n")[0].strip()
    assert info["dataset"] == "spell_backward" and env.task.answer == word[::-1]
    assert env.step(Message("assistant", f"<answer>{word[::-1]}</answer>"))[1:3] == (1.0, True)
    env.reset(seed=3)
    assert env.step(Message("assistant", "<answer>nope</answer>"))[1] == 0.0


def test_any_dataset_with_config() -> None:
    env = make("rg/any-v0", dataset="chain_sum", config={"min_terms": 5, "max_terms": 5})
    obs, _ = env.reset(seed=0)
    assert obs.messages[0].content.count("+") + obs.messages[0].content.count(" - ") >= 4
    check_env(env)


def test_dataset_without_gold_has_no_oracle() -> None:
    env = make("rg/any-v0", dataset="propositional_logic")
    assert check_env(env)["oracle"] is False
