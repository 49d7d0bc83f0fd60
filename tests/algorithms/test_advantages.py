"""Every advantage estimator vs the plain-Python references in algo_ref."""

from __future__ import annotations

from dataclasses import replace

import algo_ref as ref
import numpy as np
import pytest
import torch

from agentrl.algorithms import ADV_ESTIMATORS, AdvantageInput, compute_advantages, get_adv_estimator
from agentrl.config.schema import AlgorithmConfig

GROUP_ESTIMATORS = ["grpo", "dr_grpo", "rloo", "opo", "gspo", "reinforce_plus_plus_baseline"]
GROUP_ESTIMATORS += ["grpo_passk", "gpg"]


def run(batch, name, **cfg_kwargs):
    cfg = AlgorithmConfig(adv_estimator=name, **cfg_kwargs)
    inp = AdvantageInput(batch["rewards"], batch["mask"], batch["group_index"])
    return compute_advantages(inp, cfg)


def as_np(x: torch.Tensor) -> np.ndarray:
    return x.double().numpy()


@pytest.mark.parametrize("credit", ["episode", "turn"])
@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "rloo", "opo"])
def test_group_estimators_match_reference(batch, kind, credit):
    adv, _ = run(batch, kind, credit=credit, gamma=0.9)
    exp = ref.group_baseline_adv(
        batch["rewards"].numpy(),
        batch["mask"].numpy(),
        batch["group_index"].tolist(),
        credit,
        0.9,
        kind,
    )
    np.testing.assert_allclose(as_np(adv), exp, rtol=1e-5, atol=1e-5)


def test_grpo_without_std_is_dr_grpo(batch):
    a, _ = run(batch, "grpo", norm_adv_by_std=False)
    b, _ = run(batch, "dr_grpo")
    torch.testing.assert_close(a, b)


def test_gspo_estimator_is_grpo(batch):
    torch.testing.assert_close(run(batch, "gspo")[0], run(batch, "grpo")[0])


def test_episode_credit_broadcasts_score(batch):
    _, returns = run(batch, "grpo")
    scores = batch["rewards"].sum(-1, keepdim=True)
    torch.testing.assert_close(returns, scores * batch["mask"])


def test_turn_credit_with_final_reward_only_equals_episode_credit(batch):
    # gamma = 1 and every reward on the last trained token: the two credits coincide.
    mask = batch["mask"]
    last = (mask * torch.arange(mask.shape[1])).argmax(-1)
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(mask.shape[0]), last] = torch.arange(mask.shape[0]).float()
    b = dict(batch, rewards=rewards * mask)
    torch.testing.assert_close(run(b, "grpo", credit="turn")[0], run(b, "grpo")[0])


@pytest.mark.parametrize("credit", ["episode", "turn"])
def test_reinforce_pp_baseline_matches_reference(batch, credit):
    adv, _ = run(batch, "reinforce_plus_plus_baseline", credit=credit, gamma=0.9)
    centred = ref.group_baseline_adv(
        batch["rewards"].numpy(),
        batch["mask"].numpy(),
        batch["group_index"].tolist(),
        credit,
        0.9,
        "dr_grpo",
    )
    exp = ref.whiten(centred, batch["mask"].numpy())
    np.testing.assert_allclose(as_np(adv), exp, rtol=1e-4, atol=1e-5)


def test_reinforce_pp_matches_reference(batch):
    adv, returns = run(batch, "reinforce_plus_plus", gamma=0.8)
    rows = [
        ref.discounted_row(r, m, 0.8)
        for r, m in zip(batch["rewards"].tolist(), batch["mask"].tolist(), strict=True)
    ]
    np.testing.assert_allclose(as_np(returns), np.array(rows), rtol=1e-5, atol=1e-6)
    exp = ref.whiten(np.array(rows), batch["mask"].numpy())
    np.testing.assert_allclose(as_np(adv), exp, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("credit", ["episode", "turn"])
def test_remax_matches_reference(batch, gen, credit):
    base = torch.randn(8, generator=gen)
    inp = AdvantageInput(batch["rewards"], batch["mask"], baseline_rewards=base)
    adv, _ = compute_advantages(inp, AlgorithmConfig(adv_estimator="remax", credit=credit))
    rets = ref.returns_rows(batch["rewards"].numpy(), batch["mask"].numpy(), credit, 1.0)
    exp = (rets - base.numpy()[:, None]) * (batch["mask"].numpy() > 0)
    np.testing.assert_allclose(as_np(adv), exp, rtol=1e-5, atol=1e-6)


def test_gae_estimator_needs_values_and_matches_reference(batch, gen):
    cfg = AlgorithmConfig(adv_estimator="gae", gamma=0.99, lam=0.95)
    with pytest.raises(ValueError, match="values"):
        compute_advantages(AdvantageInput(batch["rewards"], batch["mask"]), cfg)
    values = torch.randn(batch["mask"].shape, generator=gen)
    inp = AdvantageInput(batch["rewards"], batch["mask"], values=values)
    raw, ret = compute_advantages(inp, replace(cfg, whiten_advantages=False))
    whitened, ret_w = compute_advantages(inp, cfg)  # default for gae: whitened, as verl
    ref_advs = []
    for i in range(8):
        rows = (batch["rewards"][i].tolist(), values[i].tolist(), batch["mask"][i].tolist())
        ref_adv, ref_ret = ref.gae_row(*rows, 0.99, 0.95)
        ref_advs.append(ref_adv)
        np.testing.assert_allclose(raw[i].numpy(), ref_adv, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ret[i].numpy(), ref_ret, rtol=1e-5, atol=1e-6)
    exp = ref.whiten(ref_advs, batch["mask"].numpy())
    np.testing.assert_allclose(whitened.numpy(), exp, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ret_w, ret)  # returns (the critic's target) are never whitened


@pytest.mark.parametrize("name", ["grpo", "rloo"])
def test_whiten_advantages_applies_to_any_estimator(batch, name):
    inp = AdvantageInput(batch["rewards"], batch["mask"], batch["group_index"])
    plain, _ = compute_advantages(inp, AlgorithmConfig(adv_estimator=name))
    got, _ = compute_advantages(inp, AlgorithmConfig(adv_estimator=name, whiten_advantages=True))
    np.testing.assert_allclose(
        got.numpy(), ref.whiten(plain.numpy(), batch["mask"].numpy()), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("name", sorted(ADV_ESTIMATORS))
@pytest.mark.parametrize("credit", ["episode", "turn"])
def test_all_masked_rows_give_zero_and_no_nan(batch, gen, name, credit):
    inp = AdvantageInput(
        batch["rewards"],
        batch["mask"],
        batch["group_index"],
        values=torch.randn(batch["mask"].shape, generator=gen),
        baseline_rewards=torch.randn(8, generator=gen),
        old_log_probs=-torch.rand(batch["mask"].shape, generator=gen),
        sum_pi_squared=torch.rand(batch["mask"].shape, generator=gen),
    )
    adv, ret = compute_advantages(inp, AlgorithmConfig(adv_estimator=name, credit=credit))
    assert adv.shape == ret.shape == batch["mask"].shape
    assert torch.isfinite(adv).all() and torch.isfinite(ret).all()
    assert adv[1].abs().sum() == 0  # row 1 is fully masked
    assert (adv * (1 - batch["mask"])).abs().sum() == 0


@pytest.mark.parametrize("name", sorted(ADV_ESTIMATORS))
def test_whole_batch_masked(name):
    mask = torch.zeros(4, 5)
    inp = AdvantageInput(
        torch.zeros(4, 5),
        mask,
        torch.tensor([0, 0, 1, 1]),
        torch.zeros(4, 5),
        baseline_rewards=torch.zeros(4),
        old_log_probs=torch.zeros(4, 5),
        sum_pi_squared=torch.zeros(4, 5),
    )
    adv, _ = compute_advantages(inp, AlgorithmConfig(adv_estimator=name))
    assert torch.equal(adv, torch.zeros(4, 5))


@pytest.mark.parametrize("name", GROUP_ESTIMATORS)
def test_group_of_one_is_a_clear_error(batch, name):
    b = dict(batch, group_index=torch.tensor([0, 0, 1, 1, 2, 2, 3, 4]))
    with pytest.raises(ValueError, match=rf"'{name}'.*size 1"):
        run(b, name)
    with pytest.raises(ValueError, match="group_index"):
        compute_advantages(
            AdvantageInput(batch["rewards"], batch["mask"]), AlgorithmConfig(adv_estimator=name)
        )


def test_identical_group_rewards_give_zero_advantage(batch):
    rewards = torch.zeros_like(batch["mask"])
    adv, _ = run(dict(batch, rewards=rewards), "grpo")
    assert torch.equal(adv, torch.zeros_like(adv))


def test_unknown_estimator_lists_known():
    with pytest.raises(KeyError, match="known: .*grpo"):
        get_adv_estimator("gpro")


def test_remax_needs_baseline(batch):
    with pytest.raises(ValueError, match="baseline_rewards"):
        run(batch, "remax")


def test_advantages_carry_no_grad(batch, gen):
    values = torch.randn(batch["mask"].shape, generator=gen, requires_grad=True)
    inp = AdvantageInput(batch["rewards"], batch["mask"], values=values)
    adv, _ = compute_advantages(inp, AlgorithmConfig(adv_estimator="gae"))
    assert not adv.requires_grad


@pytest.mark.parametrize("name", sorted(ADV_ESTIMATORS))
def test_bool_mask_equals_float_mask(batch, gen, name):
    extra = {"values": torch.randn(8, 16, generator=gen), "baseline_rewards": torch.randn(8)}
    extra["old_log_probs"] = -torch.rand(8, 16, generator=gen)
    extra["sum_pi_squared"] = torch.rand(8, 16, generator=gen)
    cfg = AlgorithmConfig(adv_estimator=name, credit="turn")
    f = AdvantageInput(batch["rewards"], batch["mask"], batch["group_index"], **extra)
    b = AdvantageInput(batch["rewards"], batch["mask"].bool(), batch["group_index"], **extra)
    torch.testing.assert_close(compute_advantages(f, cfg), compute_advantages(b, cfg))
