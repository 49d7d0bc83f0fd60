"""Return recursions over rows with tool-token holes vs compacted textbook versions."""

from __future__ import annotations

import algo_ref as ref
import torch
from algo_batches import make_mask, make_rewards

from agentrl.algorithms import (
    discounted_returns,
    fold_rewards,
    gae,
    turn_ids_from_mask,
    turn_returns,
)


def test_fold_rewards_moves_stray_rewards_to_previous_trained_token():
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 0.0]])
    rewards = torch.tensor([[9.0, 0, 1, 2, 3, 0, 4]])
    assert fold_rewards(rewards, mask).tolist() == [[0, 0, 6, 0, 0, 4, 0]]


def test_turn_ids_from_mask():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0, 1.0], [0, 0, 0, 0, 0, 0, 0]])
    assert turn_ids_from_mask(mask).tolist() == [
        [-1, 0, 0, -1, 1, -1, 2],
        [-1] * 7,
    ]


def test_gae_matches_compacted_reference(batch, gen):
    values = torch.randn(batch["mask"].shape, generator=gen)
    adv, ret = gae(batch["rewards"], values, batch["mask"], gamma=0.9, lam=0.8)
    for i in range(adv.shape[0]):
        m, r, v = batch["mask"][i].tolist(), batch["rewards"][i].tolist(), values[i].tolist()
        ref_adv, ref_ret = ref.gae_row(r, v, m, 0.9, 0.8)
        torch.testing.assert_close(adv[i], torch.tensor(ref_adv))
        torch.testing.assert_close(ret[i], torch.tensor(ref_ret))
    assert adv[1].abs().sum() == 0 and not adv.isnan().any()


def test_gae_with_holes_equals_gae_on_compacted_sequence(gen):
    mask = make_mask(6, 20, gen, empty_rows=())
    rewards = make_rewards(mask, gen) * mask  # rewards on trained tokens only
    values = torch.randn(mask.shape, generator=gen)
    adv, ret = gae(rewards, values, mask, gamma=0.95, lam=0.9)
    for i in range(6):
        keep = mask[i].bool()
        n = int(keep.sum())
        c_adv, c_ret = gae(
            rewards[i, keep][None], values[i, keep][None], torch.ones(1, n), 0.95, 0.9
        )
        torch.testing.assert_close(adv[i, keep], c_adv[0])
        torch.testing.assert_close(ret[i, keep], c_ret[0])
        assert adv[i, ~keep].abs().sum() == 0


def test_gae_lambda_one_gamma_one_is_return_minus_value(batch, gen):
    values = torch.randn(batch["mask"].shape, generator=gen)
    adv, ret = gae(batch["rewards"], values, batch["mask"], 1.0, 1.0)
    mc = discounted_returns(batch["rewards"], batch["mask"], 1.0)
    torch.testing.assert_close(ret, mc)
    torch.testing.assert_close(adv, (mc - values) * batch["mask"])


def test_discounted_returns_matches_reference(batch):
    out = discounted_returns(batch["rewards"], batch["mask"], 0.7)
    for i in range(out.shape[0]):
        exp = ref.discounted_row(batch["rewards"][i].tolist(), batch["mask"][i].tolist(), 0.7)
        torch.testing.assert_close(out[i], torch.tensor(exp))


def test_turn_returns_matches_reference(batch):
    turns = turn_ids_from_mask(batch["mask"])
    out = turn_returns(batch["rewards"], batch["mask"], turns, 0.5)
    for i in range(out.shape[0]):
        m, r = batch["mask"][i].tolist(), batch["rewards"][i].tolist()
        torch.testing.assert_close(out[i], torch.tensor(ref.turn_returns_row(r, m, 0.5)))


def test_turn_returns_with_explicit_turn_index():
    # One turn spanning a tool hole (the caller's turn ids win over mask spans).
    mask = torch.tensor([[1, 1, 0, 1, 0, 1.0]])
    turns = torch.tensor([[0, 0, -1, 0, -1, 1]])
    rewards = torch.tensor([[0, 0, 0, 1.0, 0, 2.0]])
    out = turn_returns(rewards, mask, turns, gamma=0.5)
    assert out.tolist() == [[2.0, 2.0, 0.0, 2.0, 0.0, 2.0]]
