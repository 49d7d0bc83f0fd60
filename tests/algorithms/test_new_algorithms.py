"""The estimators, losses, aggregation modes and KL controller added for verl parity, against
reference implementations written from their papers (`algo_ref`), on multi-turn rows with
tool-token holes and a fully masked row (the conftest batch)."""

from __future__ import annotations

import math

import algo_ref as ref
import numpy as np
import pytest
import torch

from agentrl.algorithms import (
    AdvantageInput,
    KLController,
    aggregate_loss,
    compute_advantages,
    get_policy_loss,
)
from agentrl.algorithms.cov_losses import token_covariance
from agentrl.config.schema import AlgorithmConfig, KLConfig


@pytest.fixture
def policy(batch, gen):
    shape = batch["mask"].shape
    old = -torch.rand(shape, generator=gen, dtype=torch.float64) * 3
    return {
        "old": old,
        "lp": (old + 0.4 * torch.randn(shape, generator=gen, dtype=torch.float64)),
        "adv": torch.randn(shape, generator=gen, dtype=torch.float64),
        "mask": batch["mask"].double(),
    }


def run_loss(name, p, **cfg):
    lp = p["lp"].clone().requires_grad_()
    loss, metrics = get_policy_loss(name)(
        lp, p["old"], p["adv"], p["mask"], AlgorithmConfig(policy_loss=name, **cfg)
    )
    (grad,) = torch.autograd.grad(loss, lp)
    assert all(math.isfinite(v) for v in metrics.values())
    return loss, grad, metrics


def per_token(fn, p, *args):
    rows = zip(p["lp"].tolist(), p["old"].tolist(), p["adv"].tolist(), strict=True)
    return [[fn(a, b, c, *args) for a, b, c in zip(*r, strict=True)] for r in rows]


# ---------------------------------------------------------------- aggregation


@pytest.mark.parametrize("mode", ["token-sum", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("scale", [0.0, 40.0])
def test_new_aggregation_modes_match_reference(batch, gen, mode, scale):
    loss = torch.randn(batch["mask"].shape, generator=gen)
    got = aggregate_loss(loss, batch["mask"], mode, scale).item()
    want = ref.aggregate_ext(loss.numpy(), batch["mask"].numpy(), mode, scale)
    assert math.isclose(got, want, rel_tol=1e-6)


def test_token_sum_adds_up_over_row_splits(batch, gen):
    """token-sum has no batch-dependent denominator (what lets the actor add micro-batch
    losses with weight 1); seq-mean-token-sum-norm is a mean over rows with a fixed divisor."""
    loss, mask = torch.randn(batch["mask"].shape, generator=gen), batch["mask"]
    parts = aggregate_loss(loss[:3], mask[:3], "token-sum")
    torch.testing.assert_close(
        aggregate_loss(loss, mask, "token-sum"),
        parts + aggregate_loss(loss[3:], mask[3:], "token-sum"),
    )
    norm = aggregate_loss(loss, mask, "seq-mean-token-sum-norm", 16.0)
    plain = aggregate_loss(loss, mask, "seq-mean-token-sum")
    torch.testing.assert_close(norm, plain / 16.0)


# ---------------------------------------------------------------- estimators


def inp_of(batch, gen, **extra):
    return AdvantageInput(batch["rewards"], batch["mask"], batch["group_index"], **extra)


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_passk_matches_leave_one_out_max(batch, gen, norm):
    rewards = batch["rewards"].clone()
    rewards[2] = rewards[3] = 0.0  # a tied group: nobody is the unique best
    rewards[3, 0] = 0.0
    b = dict(batch, rewards=rewards)
    adv, _ = compute_advantages(
        inp_of(b, gen), AlgorithmConfig(adv_estimator="grpo_passk", norm_adv_by_std=norm)
    )
    want = ref.passk_adv(rewards.sum(-1).numpy(), batch["group_index"].tolist(), norm)
    m = batch["mask"].numpy()
    np.testing.assert_allclose(adv.numpy(), want[:, None] * m, rtol=1e-5, atol=1e-6)
    assert adv[2].abs().sum() == 0 and adv[3].abs().sum() == 0


def test_gpg_matches_paper_formula(batch, gen):
    rewards = batch["rewards"].clone()
    rewards[5] = 0.0  # a zero reward: α counts non-zero rewards
    adv, _ = compute_advantages(
        inp_of(dict(batch, rewards=rewards), gen), AlgorithmConfig(adv_estimator="gpg")
    )
    want = ref.gpg_adv(rewards.sum(-1).numpy(), batch["group_index"].tolist())
    np.testing.assert_allclose(
        adv.numpy(), want[:, None] * batch["mask"].numpy(), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("zero_tail", [True, False])
@pytest.mark.parametrize("with_is", [False, True])
def test_optimal_token_baseline_matches_reference(batch, gen, zero_tail, with_is):
    shape = batch["mask"].shape
    old = -torch.rand(shape, generator=gen, dtype=torch.float64) * 2
    sps = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.5
    isw = 0.5 + torch.rand(shape, generator=gen, dtype=torch.float64) if with_is else None
    rewards = batch["rewards"].double()
    inp = AdvantageInput(
        rewards,
        batch["mask"].double(),
        batch["group_index"],
        old_log_probs=old,
        sum_pi_squared=sps,
        is_weights=isw,
    )
    cfg = AlgorithmConfig(adv_estimator="optimal_token_baseline", otb_zero_tail=zero_tail)
    adv, ret = compute_advantages(inp, cfg)
    want = ref.otb_adv(
        rewards.numpy(),
        batch["mask"].numpy(),
        batch["group_index"].tolist(),
        old.tolist(),
        sps.tolist(),
        None if isw is None else isw.tolist(),
        zero_tail,
    )
    np.testing.assert_allclose(adv.numpy(), want, rtol=1e-9, atol=1e-9)
    pairs = zip(rewards.tolist(), batch["mask"].tolist(), strict=True)
    rows = [ref.discounted_row(r, m, 1.0) for r, m in pairs]
    np.testing.assert_allclose(ret.numpy(), np.array(rows), rtol=1e-9, atol=1e-9)


def test_optimal_token_baseline_needs_its_inputs(batch, gen):
    with pytest.raises(ValueError, match="sum_pi_squared"):
        compute_advantages(
            inp_of(batch, gen), AlgorithmConfig(adv_estimator="optimal_token_baseline")
        )


def test_optimal_token_baseline_equals_group_mean_for_equal_weights():
    """Sanity from the formula: with W equal across a group's samples and one final reward,
    B_t is the plain mean return of the samples still running at t."""
    mask = torch.ones(2, 3)
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    inp = AdvantageInput(
        rewards,
        mask,
        torch.tensor([0, 0]),
        old_log_probs=torch.full((2, 3), math.log(0.5)),
        sum_pi_squared=torch.full((2, 3), 0.5),
    )
    adv, _ = compute_advantages(inp, AlgorithmConfig(adv_estimator="optimal_token_baseline"))
    torch.testing.assert_close(adv, torch.tensor([[0.5] * 3, [-0.5] * 3]))


# ---------------------------------------------------------------- losses


def test_sapo_matches_soft_gate(policy):
    loss, grad, _ = run_loss("sapo", policy, tau_pos=1.0, tau_neg=1.05)
    want = ref.aggregate(
        per_token(ref.sapo_token, policy, 1.0, 1.05),
        policy["mask"].numpy(),
        "seq-mean-token-mean",
    )
    assert math.isclose(loss.item(), want, rel_tol=1e-9)
    # On-policy (r = 1) the gate's slope is 1: SAPO's gradient is the plain policy gradient.
    on = dict(policy, lp=policy["old"].clone())
    _, g_sapo, _ = run_loss("sapo", on)
    _, g_ppo, _ = run_loss("ppo_clip", on, loss_agg_mode="seq-mean-token-mean")
    torch.testing.assert_close(g_sapo, g_ppo)


def test_gpg_loss_is_reinforce(policy):
    loss, grad, _ = run_loss("gpg", policy, loss_agg_mode="token-mean")
    want = ref.aggregate(
        -(policy["adv"] * policy["lp"]).numpy(), policy["mask"].numpy(), "token-mean"
    )
    assert math.isclose(loss.item(), want, rel_tol=1e-9)
    m = policy["mask"]
    torch.testing.assert_close(grad, -policy["adv"] * m / m.sum())


@pytest.mark.parametrize("clip", [0.2, 0.4])
def test_geo_mean_matches_gmpo(policy, clip):
    row_adv = policy["adv"][:, :1].expand_as(policy["adv"]).contiguous()
    p = dict(policy, adv=row_adv)
    loss, _, metrics = run_loss("geo_mean", p, clip_low=clip, clip_high=clip)
    seqs = [
        ref.gmpo_seq(*rows, clip, clip)
        for rows in zip(
            p["lp"].tolist(), p["old"].tolist(), row_adv.tolist(), p["mask"].tolist(), strict=True
        )
        if sum(rows[3]) > 0
    ]
    assert math.isclose(loss.item(), float(np.mean(seqs)), rel_tol=1e-9)
    assert 0 <= metrics["clip_frac"] <= 1


def test_clip_cov_drops_the_gradient_of_window_tokens(policy):
    """Clip-Cov, ratio large enough that every window token is dropped: the loss equals PPO's
    with exactly the tokens inside (lb, ub), not already clipped, set to 0."""
    lb, ub = 0.05, 5.0
    loss, grad, metrics = run_loss(
        "clip_cov", policy, clip_cov_ratio=1.0, clip_cov_lb=lb, clip_cov_ub=ub
    )
    cov = ref.covariances(policy["lp"].numpy(), policy["adv"].numpy(), policy["mask"].numpy())
    ppo = np.array(per_token(ref.ppo_token, policy, 0.2, 0.2, 0.0))
    ratio = np.exp(policy["lp"].numpy() - policy["old"].numpy())
    clipped = -policy["adv"].numpy() * np.clip(ratio, 0.8, 1.2) > -policy["adv"].numpy() * ratio
    m = policy["mask"].numpy() > 0
    window = m & ~clipped & (cov > lb) & (cov < ub)
    assert window.any()
    want = ref.aggregate(np.where(window, 0.0, ppo), policy["mask"].numpy(), "token-mean")
    assert math.isclose(loss.item(), want, rel_tol=1e-9)
    assert (grad.numpy()[window] == 0).all()
    assert math.isclose(metrics["cov_frac"], window.sum() / m.sum(), rel_tol=1e-6)


def test_clip_cov_drops_ratio_times_n_tokens(policy):
    _, _, metrics = run_loss("clip_cov", policy, clip_cov_ratio=0.05, clip_cov_lb=-1e9)
    n = int(policy["mask"].sum())
    assert math.isclose(metrics["cov_frac"], max(int(0.05 * n), 1) / n, rel_tol=1e-6)


def test_kl_cov_penalises_the_top_covariance_tokens(policy):
    ratio_k, coef = 0.1, 0.5
    loss, _, metrics = run_loss("kl_cov", policy, kl_cov_ratio=ratio_k, ppo_kl_coef=coef)
    m = policy["mask"].numpy() > 0
    cov = ref.covariances(policy["lp"].numpy(), policy["adv"].numpy(), policy["mask"].numpy())
    k = max(int(m.sum() * ratio_k), 1)
    top = np.zeros_like(m)
    top[m] = np.isin(np.arange(m.sum()), np.argsort(-cov[m])[:k])
    d = policy["lp"].numpy() - policy["old"].numpy()
    per = -policy["adv"].numpy() * np.exp(d) + coef * np.abs(d) * top
    want = ref.aggregate(per, policy["mask"].numpy(), "token-mean")
    assert math.isclose(loss.item(), want, rel_tol=1e-9)
    assert math.isclose(metrics["cov_frac"], k / m.sum(), rel_tol=1e-6)


def test_token_covariance_ignores_untrained_tokens(policy):
    noisy = dict(policy, lp=policy["lp"] + 100 * (1 - policy["mask"]))
    a = token_covariance(policy["lp"], policy["adv"], policy["mask"])
    b = token_covariance(noisy["lp"], policy["adv"], policy["mask"])
    sel = policy["mask"] > 0
    torch.testing.assert_close(a[sel], b[sel])


# ---------------------------------------------------------------- KL controller


def test_adaptive_kl_follows_ziegler():
    kls = [0.5, 0.3, 0.1, 0.0, 0.02, 0.15]
    ctrl = KLController.from_config(KLConfig(coef=0.2, ctrl="adaptive", target_kl=0.1, horizon=100))
    got = [ctrl.update(kl, 8) for kl in kls]
    np.testing.assert_allclose(got, ref.adaptive_kl_trace(0.2, 0.1, 100, 8, kls), rtol=1e-12)
    fixed = KLController.from_config(KLConfig(coef=0.2))
    assert [fixed.update(kl, 8) for kl in kls] == [0.2] * len(kls)


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"horizon": 0}, "horizon"), ({"target_kl": 0.0}, "target_kl"), ({"coef": 0.0}, "coef")],
)
def test_adaptive_kl_rejects_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        KLController.from_config(KLConfig(**({"coef": 0.1, "ctrl": "adaptive"} | kw)))
