"""DAPO helpers and self-play losses vs hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.algorithms import (
    filter_groups_by_reward_variance,
    overlong_penalty,
    sequence_log_probs,
    spin_loss,
    sppo_loss,
)


def test_filter_groups_2d():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert filter_groups_by_reward_variance(rewards).tolist() == [False, True, False]


def test_filter_groups_flat_with_group_index():
    rewards = torch.tensor([1.0, 0.0, 2.0, 2.0, 0.5, 0.5, 3.0, -1.0])
    groups = torch.tensor([4, 4, 9, 9, 1, 1, 0, 0])
    keep = filter_groups_by_reward_variance(rewards, groups)
    assert keep.tolist() == [True, True, False, False, False, False, True, True]
    with pytest.raises(ValueError):
        filter_groups_by_reward_variance(rewards)


def test_overlong_penalty_by_hand():
    lengths = torch.tensor([10, 12, 14, 16, 20])
    # max_len 16, buffer 4: free up to 12, linear to -1 at 16, -1 beyond.
    out = overlong_penalty(lengths, max_len=16, buffer=4, penalty=1.0)
    assert out.tolist() == [0.0, 0.0, -0.5, -1.0, -1.0]
    assert overlong_penalty(lengths, 16, 0, 1.0).tolist() == [0.0] * 5
    assert overlong_penalty(lengths, 16, 4, 2.0)[2].item() == -1.0


def test_sequence_log_probs_skips_untrained_tokens():
    lp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 0, 1], [0, 0, 0]])
    assert sequence_log_probs(lp, mask).tolist() == [-4.0, 0.0]


def test_spin_loss_by_hand():
    real, prev_real = torch.tensor([-10.0, -8.0]), torch.tensor([-11.0, -8.0])
    gen, prev_gen = torch.tensor([-5.0, -6.0]), torch.tensor([-4.0, -7.0])
    beta = 0.5
    # margins: (1 − (−1)) = 2, (0 − 1) = −1
    exp = (math.log1p(math.exp(-beta * 2)) + math.log1p(math.exp(-beta * -1))) / 2
    loss, metrics = spin_loss(real, prev_real, gen, prev_gen, beta)
    assert math.isclose(loss.item(), exp, rel_tol=1e-6)
    assert metrics["spin_accuracy"] == 0.5 and metrics["spin_margin"] == 0.5


def test_spin_gradient_raises_real_and_lowers_generated():
    real = torch.tensor([-3.0], requires_grad=True)
    gen = torch.tensor([-3.0], requires_grad=True)
    loss, _ = spin_loss(real, torch.tensor([-3.0]), gen, torch.tensor([-3.0]), beta=0.1)
    loss.backward()
    assert real.grad.item() < 0 < gen.grad.item()  # descent raises log π(real)


def test_sppo_loss_by_hand():
    pol, prev = torch.tensor([-2.0, -3.0, -1.0]), torch.tensor([-2.5, -3.0, -1.0])
    win = torch.tensor([0.9, 0.5, 0.2])
    eta = 2.0
    # log ratios 0.5, 0, 0; targets 0.8, 0, -0.6
    exp = ((0.5 - 0.8) ** 2 + 0.0 + (0.0 + 0.6) ** 2) / 3
    loss, metrics = sppo_loss(pol, prev, win, eta)
    assert math.isclose(loss.item(), exp, rel_tol=1e-6)
    assert math.isclose(metrics["sppo_target"], (0.8 + 0 - 0.6) / 3, rel_tol=1e-6)


def test_sppo_fixed_point_has_zero_gradient():
    win = torch.tensor([0.7, 0.3])
    prev = torch.tensor([-4.0, -4.0])
    pol = (prev + 1.5 * (win - 0.5)).requires_grad_()
    loss, _ = sppo_loss(pol, prev, win, eta=1.5)
    loss.backward()
    assert loss.item() < 1e-12 and pol.grad.abs().max().item() < 1e-6
