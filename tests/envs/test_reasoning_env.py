"""reasoning-gym adapter: datasets by name, their verifiers as rewards."""

from __future__ import annotations

import re
from typing import Any

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


def _copied_word_list(env: Any) -> str:
    prompt = env.task.messages[-1].content
    return re.search(r"comma-separated list: (.*)\n", prompt).group(1)


def test_word_sorting_pays_nothing_for_the_unsorted_input() -> None:
    # reasoning-gym gives max(positional, 0.2) to any permutation of the words, the
    # question's own list included: reward for no sorting at all.
    env = make("rg/word_sorting-v0")
    for seed in range(5):
        env.reset(seed=seed)
        copied = _copied_word_list(env)
        assert env.data.score_answer(copied, entry=env.entry) >= 0.2  # upstream pays it
        assert env.step(Message("assistant", f"<answer>{copied}</answer>"))[1] == 0.0
        env.reset(seed=seed)
        assert env.step(env.oracle_action())[1] == 1.0


@pytest.mark.parametrize(
    "name", ["basic_arithmetic", "chain_sum", "leg_counting", "spell_backward", "word_sorting"]
)
def test_registered_ids_score_binary(name: str) -> None:
    env = make(f"rg/{name}-v0")
    env.reset(seed=1)
    wrong = f"{env.task.answer}0"  # contains the gold / matches it position by position
    partial = env.data.score_answer(wrong, entry=env.entry)
    assert 0.0 < partial < 1.0  # upstream pays partial credit for a wrong answer
    assert env.step(Message("assistant", f"<answer>{wrong}</answer>"))[1] == 0.0
    env.reset(seed=1)
    assert env.step(env.oracle_action())[1] == 1.0


def test_any_keeps_the_upstream_score_unless_binary() -> None:
    for binary in (False, True):
        env = make("rg/any-v0", dataset="word_sorting", binary=binary)
        env.reset(seed=0)
        copied = _copied_word_list(env)
        upstream = env.data.score_answer(copied, entry=env.entry)
        got = env.step(Message("assistant", f"<answer>{copied}</answer>"))[1]
        assert upstream >= 0.2 and got == (0.0 if binary else upstream)
