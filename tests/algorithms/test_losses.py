"""Policy losses, aggregation, value loss and entropy vs per-token Python references."""

from __future__ import annotations

import math

import algo_ref as ref
import numpy as np
import pytest
import torch

from agentrl.algorithms import aggregate_loss, entropy_from_logits, get_policy_loss, value_loss
from agentrl.config.schema import AlgorithmConfig

MODES = ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]


@pytest.fixture
def policy(batch, gen):
    shape = batch["mask"].shape
    old = -torch.rand(shape, generator=gen) * 3
    return {
        "old": old,
        "lp": (old + 0.4 * torch.randn(shape, generator=gen)).requires_grad_(),
        "adv": torch.randn(shape, generator=gen),
        "mask": batch["mask"],
    }


def loss_of(name, p, is_weights=None, **cfg):
    fn = get_policy_loss(name)
    return fn(p["lp"], p["old"], p["adv"], p["mask"], AlgorithmConfig(**cfg), is_weights=is_weights)


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_matches_reference(batch, gen, mode):
    loss = torch.randn(batch["mask"].shape, generator=gen)
    got = aggregate_loss(loss, batch["mask"], mode)
    assert math.isclose(
        got.item(), ref.aggregate(loss.numpy(), batch["mask"].numpy(), mode), rel_tol=1e-5
    )


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_empty_batch_is_zero(mode):
    loss = torch.randn(3, 4, requires_grad=True)
    out = aggregate_loss(loss, torch.zeros(3, 4), mode)
    assert out.item() == 0.0
    out.backward()
    assert torch.isfinite(loss.grad).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("clip_low", "clip_high", "dual_c"), [(0.2, 0.2, 0.0), (0.2, 0.28, 3.0)])
def test_ppo_clip_matches_reference(policy, mode, clip_low, clip_high, dual_c):
    loss, metrics = loss_of(
        "ppo_clip",
        policy,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip_c=dual_c,
        loss_agg_mode=mode,
    )
    lp, old, adv = policy["lp"].tolist(), policy["old"].tolist(), policy["adv"].tolist()
    per_token = [
        [ref.ppo_token(a, b, c, clip_low, clip_high, dual_c) for a, b, c in zip(*rows, strict=True)]
        for rows in zip(lp, old, adv, strict=True)
    ]
    exp = ref.aggregate(per_token, policy["mask"].numpy(), mode)
    assert math.isclose(loss.item(), exp, rel_tol=1e-5)
    assert metrics["approx_kl"] >= 0 and 0 <= metrics["clip_frac"] <= 1
    ratios = [
        math.exp(a - b)
        for ra, rb, rm in zip(lp, old, policy["mask"].tolist(), strict=True)
        for a, b, m in zip(ra, rb, rm, strict=True)
        if m
    ]
    assert math.isclose(metrics["ratio_max"], max(ratios), rel_tol=1e-5)
    assert math.isclose(metrics["ratio_mean"], float(np.mean(ratios)), rel_tol=1e-5)


def one_token(ratio: float, adv: float, **cfg):
    lp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    fn = get_policy_loss("ppo_clip")
    loss, metrics = fn(
        lp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), AlgorithmConfig(**cfg)
    )
    loss.backward()
    return loss.item(), lp.grad.item(), metrics


def test_clip_higher_is_asymmetric():
    # A > 0, r = 1.25: clipped at 1.2 with symmetric 0.2, free under clip_high = 0.28.
    loss, grad, m = one_token(1.25, 1.0, clip_low=0.2, clip_high=0.2)
    assert math.isclose(loss, -1.2, rel_tol=1e-6) and grad == 0.0 and m["clip_frac"] == 1.0
    loss, grad, m = one_token(1.25, 1.0, clip_low=0.2, clip_high=0.28)
    assert math.isclose(loss, -1.25, rel_tol=1e-6) and grad != 0.0 and m["clip_frac"] == 0.0
    # A < 0, r = 0.75: the lower bound still clips at 0.8.
    loss, grad, _ = one_token(0.75, -1.0, clip_low=0.2, clip_high=0.28)
    assert math.isclose(loss, 0.8, rel_tol=1e-6) and grad == 0.0


def test_dual_clip_bounds_negative_advantage_loss():
    # A < 0 and r = 10: plain PPO loss is 10·|A|; dual clip caps it at c·|A| with no gradient.
    loss, grad, _ = one_token(10.0, -2.0)
    assert math.isclose(loss, 20.0, rel_tol=1e-6) and grad != 0.0
    loss, grad, m = one_token(10.0, -2.0, dual_clip_c=3.0)
    assert math.isclose(loss, 6.0, rel_tol=1e-6) and grad == 0.0 and m["dual_clip_frac"] == 1.0
    # Positive advantages are untouched by the dual clip.
    assert one_token(10.0, 1.0, dual_clip_c=3.0)[0] == one_token(10.0, 1.0)[0]
    with pytest.raises(ValueError, match="dual_clip_c"):
        one_token(1.0, 1.0, dual_clip_c=0.5)


def test_dual_clip_loss_below_ratio_c():
    # r between 1 + clip_high and c: the regular PPO term applies.
    loss, _, m = one_token(2.0, -1.0, dual_clip_c=3.0)
    assert math.isclose(loss, 2.0, rel_tol=1e-6) and m["dual_clip_frac"] == 0.0


def test_is_weights_scale_per_token_loss(policy, gen):
    w = torch.rand(policy["mask"].shape, generator=gen)
    plain, _ = loss_of("ppo_clip", policy, loss_agg_mode="seq-mean-token-sum")
    weighted, _ = loss_of("ppo_clip", policy, is_weights=w, loss_agg_mode="seq-mean-token-sum")
    assert not math.isclose(plain.item(), weighted.item())
    ones, _ = loss_of("ppo_clip", policy, is_weights=torch.ones_like(w))
    assert math.isclose(ones.item(), loss_of("ppo_clip", policy)[0].item())


def gspo_reference(lp, old, adv, mask, clip_low, clip_high):
    """Sequence-level GSPO with A constant per row: s_i = exp(mean log ratio), autograd on it."""
    per_seq = []
    for i in range(lp.shape[0]):
        m = mask[i].bool()
        if not m.any():
            continue
        s = torch.exp((lp[i, m] - old[i, m]).mean())
        a = adv[i, m][0]
        per_seq.append(torch.maximum(-a * s, -a * s.clamp(1 - clip_low, 1 + clip_high)))
    return torch.stack(per_seq).mean()


@pytest.mark.parametrize(("clip_low", "clip_high"), [(3e-4, 4e-4), (0.2, 0.3)])
def test_gspo_matches_sequence_level_value_and_gradient(policy, clip_low, clip_high):
    row_adv = policy["adv"][:, :1].expand_as(policy["adv"]).contiguous()
    p = dict(policy, adv=row_adv)
    loss, metrics = loss_of("gspo", p, clip_low=clip_low, clip_high=clip_high)
    (grad,) = torch.autograd.grad(loss, p["lp"])
    lp_ref = p["lp"].detach().clone().requires_grad_()
    exp = gspo_reference(lp_ref, p["old"], row_adv, p["mask"], clip_low, clip_high)
    (exp_grad,) = torch.autograd.grad(exp, lp_ref)
    assert math.isclose(loss.item(), exp.item(), rel_tol=1e-5)
    torch.testing.assert_close(grad, exp_grad)
    assert 0 <= metrics["clip_frac"] <= 1


def test_gspo_ignores_token_level_agg_mode(policy):
    a, _ = loss_of("gspo", policy, loss_agg_mode="token-mean")
    b, _ = loss_of("gspo", policy, loss_agg_mode="seq-mean-token-sum")
    assert a.item() == b.item()


def test_cispo_value_and_gradient(policy):
    loss, m = loss_of("cispo", policy, clip_low=1.0, clip_high=0.3)
    (grad,) = torch.autograd.grad(loss, policy["lp"])
    lp, old, adv, mask = policy["lp"].detach(), policy["old"], policy["adv"], policy["mask"]
    w = np.minimum(np.exp((lp - old).numpy()), 1.3)
    per_token = -w * adv.numpy() * lp.numpy()
    n = mask.sum().item()
    assert math.isclose(
        loss.item(), ref.aggregate(per_token, mask.numpy(), "token-mean"), rel_tol=1e-5
    )
    # Every token keeps a gradient −w·A/N: clipping the weight never zeroes it.
    np.testing.assert_allclose(grad.numpy(), -w * adv.numpy() * mask.numpy() / n, rtol=1e-5)
    assert 0 <= m["clip_frac"] <= 1


def test_unknown_policy_loss_lists_known():
    with pytest.raises(
        KeyError, match="known: cispo, clip_cov, geo_mean, gpg, gspo, kl_cov, ppo_clip, sapo"
    ):
        get_policy_loss("ppo")


@pytest.mark.parametrize("clip", [0.0, 0.2])
def test_value_loss_matches_reference(batch, gen, clip):
    shape = batch["mask"].shape
    values, old, returns = (torch.randn(shape, generator=gen) for _ in range(3))
    loss, metrics = value_loss(values, old, returns, batch["mask"], clip)
    per_token = []
    for v_row, o_row, r_row in zip(values.tolist(), old.tolist(), returns.tolist(), strict=True):
        row = []
        for v, o, r in zip(v_row, o_row, r_row, strict=True):
            vc = o + min(max(v - o, -clip), clip) if clip > 0 else v
            row.append(0.5 * max((v - r) ** 2, (vc - r) ** 2))
        per_token.append(row)
    exp = ref.aggregate(per_token, batch["mask"].numpy(), "token-mean")
    assert math.isclose(loss.item(), exp, rel_tol=1e-5)
    assert (metrics["vf_clip_frac"] == 0) == (clip == 0)


def test_entropy_from_logits(gen):
    logits = torch.randn(3, 5, 11, generator=gen) * 4
    logits[0, 0, :5] = -1e4  # near-zero probabilities stay finite
    p = torch.softmax(logits.double(), -1).numpy()
    exp = -(p * np.log(np.clip(p, 1e-300, None))).sum(-1)
    np.testing.assert_allclose(entropy_from_logits(logits).numpy(), exp, rtol=1e-4, atol=1e-5)
    uniform = entropy_from_logits(torch.zeros(2, 7))
    torch.testing.assert_close(uniform, torch.full((2,), math.log(7)))


@pytest.mark.parametrize("name", ["ppo_clip", "gspo", "cispo"])
def test_bool_mask_equals_float_mask(policy, name):
    a, ma = loss_of(name, policy, dual_clip_c=3.0)
    b, mb = loss_of(name, dict(policy, mask=policy["mask"].bool()), dual_clip_c=3.0)
    assert a.item() == b.item() and ma == mb
