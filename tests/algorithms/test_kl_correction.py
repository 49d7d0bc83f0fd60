"""KL estimators and rollout/train importance weights."""

from __future__ import annotations

import math

import algo_ref as ref
import pytest
import torch

from agentrl.algorithms import importance_weights, kl_penalized_rewards, kl_penalty

ALIASES = {"k1": "k1", "abs": "abs", "k2": "k2", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_kl_estimators_match_reference(gen, name):
    lp = -torch.rand(4, 9, generator=gen, dtype=torch.float64) * 4
    ref_lp = -torch.rand(4, 9, generator=gen, dtype=torch.float64) * 4
    got = kl_penalty(lp, ref_lp, name)
    for i in range(4):
        for t in range(9):
            exp = ref.k_estimators(lp[i, t].item(), ref_lp[i, t].item())[ALIASES[name]]
            assert math.isclose(got[i, t].item(), exp, rel_tol=1e-9, abs_tol=1e-12)


def test_k3_nonnegative_and_clamped(gen):
    d = torch.randn(1000, generator=gen) * 10
    k3 = kl_penalty(d, torch.zeros_like(d), "low_var_kl")
    assert (k3 >= 0).all() and (k3 <= 10).all() and torch.isfinite(k3).all()


def test_k1_and_k3_are_unbiased_for_true_kl(gen):
    # Sample tokens from π; E_π[k1] = E_π[k3] = KL(π‖ref) > 0, while single k1 samples go negative.
    # ref close enough to π that k3's ±10 clamp never binds (the clamp trades bias for safety).
    logits_pi = torch.randn(50, generator=gen)
    logits_ref = logits_pi + 0.7 * torch.randn(50, generator=gen)
    logp, logr = logits_pi.log_softmax(-1), logits_ref.log_softmax(-1)
    true_kl = (logp.exp() * (logp - logr)).sum().item()
    tokens = torch.multinomial(logp.exp(), 200_000, replacement=True, generator=gen)
    k1 = kl_penalty(logp[tokens], logr[tokens], "k1")
    k3 = kl_penalty(logp[tokens], logr[tokens], "k3")
    assert true_kl > 0 and (k1 < 0).any()
    assert abs(k1.mean().item() - true_kl) < 0.03 * true_kl + 0.01
    assert abs(k3.mean().item() - true_kl) < 0.03 * true_kl + 0.01
    assert k3.var() < k1.var()


def test_unknown_kl_estimator():
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k4")


def test_kl_penalized_rewards(batch, gen):
    lp = torch.randn(batch["mask"].shape, generator=gen)
    ref_lp = torch.randn(batch["mask"].shape, generator=gen)
    out, metrics = kl_penalized_rewards(batch["rewards"], lp, ref_lp, batch["mask"], 0.1, "k1")
    exp = batch["rewards"] - 0.1 * (lp - ref_lp) * batch["mask"]
    torch.testing.assert_close(out, exp)
    assert "kl_reward" in metrics


def is_reference(old, rollout, mask, mode, cap):
    """Per-row loops over the formulas in correction.py's docstring."""
    out = torch.zeros_like(mask)
    for i in range(mask.shape[0]):
        trained = [t for t in range(mask.shape[1]) if mask[i, t] > 0]
        seq = math.exp(sum(old[i, t].item() - rollout[i, t].item() for t in trained))
        for t in trained:
            rho = seq if mode.startswith("sequence") else math.exp(old[i, t] - rollout[i, t])
            if mode == "none":
                w = 1.0
            elif mode in ("token", "sequence"):
                w = min(rho, cap)
            else:
                w = rho if 1 / cap <= rho <= cap else 0.0
            out[i, t] = w
    return out


@pytest.mark.parametrize("mode", ["none", "token", "sequence", "token_mask", "sequence_mask"])
def test_importance_weights_match_reference(batch, gen, mode):
    old = -torch.rand(batch["mask"].shape, generator=gen, dtype=torch.float64) * 3
    rollout = old + 0.3 * torch.randn(old.shape, generator=gen, dtype=torch.float64)
    mask = batch["mask"].double()
    w, metrics = importance_weights(old, rollout, mask, mode, cap=2.0)
    torch.testing.assert_close(w, is_reference(old, rollout, mask, mode, 2.0))
    assert not w.requires_grad and (w[mask == 0] == 0).all()
    assert metrics["rollout_kl"] >= 0 and 0 <= metrics["tis_changed_frac"] <= 1
    if mode in ("token", "sequence"):
        assert (w <= 2.0).all()
    if mode.endswith("_mask"):
        kept = w[w > 0]
        assert ((kept >= 0.5) & (kept <= 2.0)).all()


def test_importance_weights_sequence_modes_drop_whole_sequences():
    old = torch.zeros(2, 4)
    rollout = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, -0.5, -0.5, 0.0]])  # row 1: ρ = e
    mask = torch.ones(2, 4)
    w, _ = importance_weights(old, rollout, mask, "sequence_mask", cap=2.0)
    assert w[0].tolist() == [1.0] * 4 and w[1].tolist() == [0.0] * 4
    w, _ = importance_weights(old, rollout, mask, "sequence", cap=2.0)
    assert w[1].tolist() == [2.0] * 4
    w, _ = importance_weights(old, rollout, mask, "token_mask", cap=2.0)
    assert w[1].tolist() == pytest.approx([1.0, math.exp(0.5), math.exp(0.5), 1.0])


def test_importance_weights_validates_cap():
    with pytest.raises(ValueError, match="tis_cap"):
        importance_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), "token", 1.0)
