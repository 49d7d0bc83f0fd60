"""A split episode (one harness session recorded as several segments) is one sample of its
group: the group-relative advantages of its segments equal the advantage the unsplit episode
gets, and the other episodes' advantages do not move. Hand-checked against the same group
with every episode in one row."""

from __future__ import annotations

import pytest
import torch

from agentrl.algorithms import AdvantageInput, compute_advantages
from agentrl.config import AlgorithmConfig
from agentrl.trainer.batch import episode_index
from agentrl.types import Trajectory


def _input(rewards: list[float], episodes: list[int] | None) -> AdvantageInput:
    b = len(rewards)
    token_rewards = torch.zeros(b, 3)
    token_rewards[:, 2] = torch.tensor(rewards)
    return AdvantageInput(
        token_rewards=token_rewards,
        mask=torch.ones(b, 3),
        group_index=torch.zeros(b, dtype=torch.long),
        episode_index=None if episodes is None else torch.tensor(episodes),
    )


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
def test_split_segments_get_the_unsplit_episodes_advantage(estimator: str) -> None:
    cfg = AlgorithmConfig(adv_estimator=estimator, whiten_advantages=False)
    whole, _ = compute_advantages(_input([1.0, 0.0, 0.0, 1.0], None), cfg)
    # episode 0 split in three segments, episode 2 in two
    split, _ = compute_advantages(
        _input([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0], [0, 0, 0, 1, 2, 2, 3]), cfg
    )
    per_row = [0, 0, 0, 1, 2, 2, 3]
    assert torch.allclose(split[:, 0], whole[per_row, 0], atol=1e-6)


def test_grpo_by_hand() -> None:
    """rewards by episode [1, 0, 0]: mean 1/3, unbiased std sqrt(1/3); episode 0 in 2 rows."""
    cfg = AlgorithmConfig(adv_estimator="grpo")
    adv, _ = compute_advantages(_input([1.0, 1.0, 0.0, 0.0], [0, 0, 1, 2]), cfg)
    std = (1 / 3) ** 0.5
    want = torch.tensor([2 / 3, 2 / 3, -1 / 3, -1 / 3]) / (std + 1e-6)
    assert torch.allclose(adv[:, 0], want, atol=1e-5)


def test_episode_index_from_metadata() -> None:
    def t(episode: str | None) -> Trajectory:
        traj = Trajectory(prompt_ids=[1])
        if episode is not None:
            traj.metadata["episode"] = episode
        return traj

    assert episode_index([t(None), t(None)]) is None  # built-in rollouts: a row each
    assert episode_index([t("a"), t("b"), t("a"), t(None)]).tolist() == [0, 1, 0, 2]


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum", "token-mean"])
def test_split_episode_weighs_one_sequence(mode: str) -> None:
    """Under a seq-mean loss a split episode's k segments each get A / k (the episode counts
    once); under token-mean its tokens already count once, so A is untouched."""
    cfg = AlgorithmConfig(adv_estimator="grpo", loss_agg_mode=mode)  # type: ignore[arg-type]
    whole, _ = compute_advantages(_input([1.0, 0.0, 0.0], None), cfg)
    split, _ = compute_advantages(_input([1.0, 1.0, 0.0, 0.0], [0, 0, 1, 2]), cfg)
    k = 2.0 if mode.startswith("seq-mean") else 1.0
    assert torch.allclose(split[:2, 0], whole[0, 0].expand(2) / k, atol=1e-6)
    assert torch.allclose(split[2:, 0], whole[1:, 0], atol=1e-6)
