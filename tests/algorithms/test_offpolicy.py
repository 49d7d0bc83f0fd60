"""Off-policy PPO (agentrl/algorithms/offpolicy.py) against hand-written references: plain
loops over tokens, in float64, on random multi-turn batches (holes, padding, an empty row).

- decoupled: clip π_θ/π_prox, weight w = π_prox/π_behav, w > cap → 0 but kept in the
  denominator (AReaL); the loss and its gradient equal a per-token loop's.
- bypass: clip π_θ/π_behav, no weight; equals decoupled when π_prox = π_behav.
- rejection masks: IcePop tokens and geometric-mean sequences outside [low, high].
- edge cases: every token masked, every weight over the cap, no cap, the band's default low.
"""

from __future__ import annotations

import math
from dataclasses import replace

import algo_ref as ref
import pytest
import torch
from algo_batches import make_mask

from agentrl.algorithms import (
    behaviour_weights,
    decoupled_loss,
    get_policy_loss,
    off_policy_loss,
    rollout_rejection,
)
from agentrl.config import AlgorithmConfig

PPO = get_policy_loss("ppo_clip")


def _inputs(gen: torch.Generator, spread: float = 0.5) -> dict[str, torch.Tensor]:
    mask = make_mask(6, 12, gen).double()
    behav = -torch.rand(mask.shape, generator=gen, dtype=torch.float64) * 3
    prox = behav + spread * torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    logp = prox + 0.3 * torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    adv = torch.randn(mask.shape, generator=gen, dtype=torch.float64)
    return {"mask": mask, "behav": behav, "prox": prox, "logp": logp, "adv": adv}


def ref_behaviour_weights(prox, behav, mask, cap):
    out = torch.zeros_like(prox)
    for i in range(prox.shape[0]):
        for t in range(prox.shape[1]):
            if mask[i, t] == 0:
                continue
            w = math.exp(float(prox[i, t] - behav[i, t]))
            out[i, t] = 0.0 if cap > 0 and w > cap else w
    return out


def ref_decoupled_loss(logp, prox, behav, adv, mask, cfg):
    """The scalar loss as a sum of per-token torch terms (so autograd gives the reference
    gradient too): token-mean over the trained tokens, capped ones included."""
    total, count = logp.new_zeros(()), 0
    for i in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            if mask[i, t] == 0:
                continue
            count += 1
            w = math.exp(float(prox[i, t] - behav[i, t]))
            if cfg.behav_weight_cap > 0 and w > cfg.behav_weight_cap:
                continue  # weight 0, still counted
            ratio = torch.exp(logp[i, t] - prox[i, t])
            a = float(adv[i, t])
            clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
            total = total + w * torch.maximum(-a * ratio, -a * clipped)
    return total / max(count, 1)


@pytest.mark.parametrize("cap", [0.0, 1.5, 5.0])
def test_behaviour_weights_match_reference(gen, cap):
    x = _inputs(gen, spread=0.8)
    w, metrics = behaviour_weights(x["prox"], x["behav"], x["mask"], cap)
    expected = ref_behaviour_weights(x["prox"], x["behav"], x["mask"], cap)
    torch.testing.assert_close(w, expected)
    trained = x["mask"] > 0
    rho = (x["prox"] - x["behav"]).exp()
    over = int(((rho > cap) & trained).sum()) if cap > 0 else 0
    if cap == 1.5:
        assert over > 0  # the cap is hit on this batch
    assert metrics["offpolicy/behav_masked_frac"] == pytest.approx(over / int(trained.sum()))
    kept = expected[trained & (expected > 0)]
    assert metrics["offpolicy/behav_weight_max"] == pytest.approx(float(kept.max()))
    assert metrics["offpolicy/behav_weight_mean"] == pytest.approx(float(kept.mean()))
    assert metrics["offpolicy/behav_kl"] >= 0


@pytest.mark.parametrize("cap", [0.0, 1.5])
def test_decoupled_loss_and_gradient_match_reference(gen, cap):
    x = _inputs(gen, spread=0.8)
    cfg = AlgorithmConfig(clip_low=0.2, clip_high=0.28, behav_weight_cap=cap)
    lp = x["logp"].clone().requires_grad_(True)
    loss, metrics = decoupled_loss(PPO, lp, x["prox"], x["behav"], x["adv"], x["mask"], cfg)
    (grad,) = torch.autograd.grad(loss, lp)
    lp_ref = x["logp"].clone().requires_grad_(True)
    expected = ref_decoupled_loss(lp_ref, x["prox"], x["behav"], x["adv"], x["mask"], cfg)
    (grad_ref,) = torch.autograd.grad(expected, lp_ref)
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, grad_ref)
    assert "clip_frac" in metrics and "offpolicy/behav_masked_frac" in metrics


def test_decoupled_loss_seq_mean_matches_reference_aggregation(gen):
    """The weight enters per token before aggregation: seq-mean-token-mean of w·l."""
    x = _inputs(gen, spread=0.8)
    cfg = AlgorithmConfig(loss_agg_mode="seq-mean-token-mean", behav_weight_cap=2.0)
    loss, _ = decoupled_loss(PPO, x["logp"], x["prox"], x["behav"], x["adv"], x["mask"], cfg)
    w = ref_behaviour_weights(x["prox"], x["behav"], x["mask"], 2.0)
    per_token = [
        [
            w[i, t].item()
            * ref.ppo_token(
                float(x["logp"][i, t]),
                float(x["prox"][i, t]),
                float(x["adv"][i, t]),
                cfg.clip_low,
                cfg.clip_high,
                0.0,
            )  # fmt: skip
            for t in range(w.shape[1])
        ]
        for i in range(w.shape[0])
    ]
    expected = ref.aggregate(per_token, x["mask"].tolist(), "seq-mean-token-mean")
    assert float(loss) == pytest.approx(expected, rel=1e-10)


def test_bypass_equals_decoupled_when_proximal_is_behaviour(gen):
    x = _inputs(gen)
    lp = x["logp"].clone().requires_grad_(True)
    bypass = AlgorithmConfig(off_policy="bypass")
    # bypass ignores π_old entirely: any old log-probs give the same loss.
    got, _ = off_policy_loss(PPO, lp, x["prox"], x["behav"], x["adv"], x["mask"], bypass)
    (g_bypass,) = torch.autograd.grad(got, lp)
    decoupled = AlgorithmConfig(off_policy="decoupled", behav_weight_cap=2.0)
    want, m = off_policy_loss(PPO, lp, x["behav"], x["behav"], x["adv"], x["mask"], decoupled)
    (g_dec,) = torch.autograd.grad(want, lp)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g_bypass, g_dec)
    assert m["offpolicy/behav_masked_frac"] == 0.0 and m["offpolicy/behav_weight_max"] == 1.0
    plain, _ = PPO(x["logp"], x["behav"], x["adv"], x["mask"], bypass)
    torch.testing.assert_close(got.detach(), plain)


def test_standard_is_the_plain_loss_and_missing_old_means_own_log_probs(gen):
    x = _inputs(gen)
    standard = AlgorithmConfig()
    got, _ = off_policy_loss(PPO, x["logp"], x["prox"], x["behav"], x["adv"], x["mask"], standard)
    torch.testing.assert_close(got, PPO(x["logp"], x["prox"], x["adv"], x["mask"], standard)[0])
    # No old forward (one on-policy pass): the proximal is π_θ itself, detached.
    cfg = AlgorithmConfig(off_policy="decoupled", behav_weight_cap=0.0)
    lp = x["logp"].clone().requires_grad_(True)
    got, _ = off_policy_loss(PPO, lp, None, x["behav"], x["adv"], x["mask"], cfg)
    lp_ref = x["logp"].clone().requires_grad_(True)
    want = ref_decoupled_loss(lp_ref, x["logp"], x["behav"], x["adv"], x["mask"], cfg)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(
        torch.autograd.grad(got, lp)[0], torch.autograd.grad(want, lp_ref)[0]
    )


def test_decoupled_edge_cases_all_masked_and_all_over_cap(gen):
    x = _inputs(gen)
    cfg = AlgorithmConfig(off_policy="decoupled", behav_weight_cap=2.0)
    lp = x["logp"].clone().requires_grad_(True)
    empty = torch.zeros_like(x["mask"])
    loss, m = decoupled_loss(PPO, lp, x["prox"], x["behav"], x["adv"], empty, cfg)
    assert float(loss.detach()) == 0.0 and all(math.isfinite(float(v)) for v in m.values())
    # Every token 10x likelier under π_prox than under π_behav: all weights 0, loss 0, no grad.
    loss, m = decoupled_loss(
        PPO, lp, x["behav"] + math.log(10), x["behav"], x["adv"], x["mask"], cfg
    )
    (grad,) = torch.autograd.grad(loss, lp)
    assert float(loss.detach()) == 0.0 and float(grad.abs().max()) == 0.0
    assert m["offpolicy/behav_masked_frac"] == 1.0 and m["offpolicy/behav_weight_mean"] == 0.0


def ref_rejection(old, behav, mask, mode, lo, hi):
    keep = torch.zeros_like(old)
    for i in range(old.shape[0]):
        ts = [t for t in range(old.shape[1]) if mask[i, t] > 0]
        if mode == "geometric" and ts:
            g = math.exp(sum(float(old[i, t] - behav[i, t]) for t in ts) / len(ts))
            row_ok = lo <= g <= hi
        for t in ts:
            rho = math.exp(float(old[i, t] - behav[i, t]))
            keep[i, t] = float(lo <= rho <= hi) if mode == "token" else float(row_ok)
    return keep


@pytest.mark.parametrize(
    ("mode", "low", "high", "spread"),
    [
        ("token", 0.5, 2.0, 0.4),
        ("token", 0.0, 1.5, 0.4),
        ("geometric", 0.9, 1.1, 0.2),
        ("geometric", 0.0, 1.05, 0.1),
    ],
)
def test_rejection_masks_match_reference(gen, mode, low, high, spread):
    x = _inputs(gen, spread=spread)
    keep, m = rollout_rejection(x["prox"], x["behav"], x["mask"], mode, low, high)
    lo = low if low > 0 else 1 / high
    expected = ref_rejection(x["prox"], x["behav"], x["mask"], mode, lo, high)
    torch.testing.assert_close(keep, expected)
    trained = x["mask"] > 0
    dropped = int((trained & (expected == 0)).sum())
    assert 0 < dropped < int(trained.sum())  # the band bites on this batch, and keeps some
    assert m["offpolicy/mask_token_frac"] == pytest.approx(dropped / int(trained.sum()))
    rows = trained.any(-1)
    rejected_rows = (trained & (expected == 0)).any(-1)
    assert m["offpolicy/mask_seq_frac"] == pytest.approx(float(rejected_rows.sum() / rows.sum()))
    if mode == "geometric":  # whole sequences: a row is all kept or all dropped
        for i in range(keep.shape[0]):
            vals = set(keep[i][trained[i]].tolist())
            assert len(vals) <= 1


def test_rejection_edge_cases():
    old = torch.zeros(3, 4, dtype=torch.float64)
    behav = torch.tensor([[0.0] * 4, [0.0, -3.0, 0.0, 0.0], [-3.0] * 4], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=torch.float64)
    keep, m = rollout_rejection(old, behav, mask, "token", 0.0, 5.0)
    assert keep.tolist() == [[1, 1, 0, 0], [1, 0, 1, 1], [0, 0, 0, 0]]
    assert m["offpolicy/mask_seq_frac"] == 0.5  # row 2 has no trained token
    # geometric: row 1's mean log-ratio is 0.75 → e^0.75 ≈ 2.1 > 1.5: the whole row goes.
    keep, _ = rollout_rejection(old, behav, mask, "geometric", 0.0, 1.5)
    assert keep.tolist() == [[1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    keep, m = rollout_rejection(old, behav, torch.zeros_like(mask), "geometric", 0.0, 1.5)
    assert float(keep.sum()) == 0 and m["offpolicy/mask_token_frac"] == 0.0
    keep, m = rollout_rejection(old, behav, mask, "none", 0.0, 1.5)
    assert torch.equal(keep, mask) and m == {}
    with pytest.raises(ValueError, match="must hold 1"):
        rollout_rejection(old, behav, mask, "token", 0.0, 0.8)


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        ({"off_policy": "decoupled", "tis_mode": "token"}, "tis_mode: token"),
        ({"off_policy": "bypass", "tis_mode": "sequence"}, "set tis_mode: none"),
        ({"off_policy": "bypass", "rollout_mask": "token"}, "bypass computes no"),
        ({"behav_weight_cap": 0.5}, "behav_weight_cap"),
        ({"rollout_mask": "geometric", "rollout_mask_high": 0.99}, "must hold 1"),
        ({"rollout_mask": "token", "rollout_mask_low": 1.2, "rollout_mask_high": 2.0}, "hold 1"),
    ],
)
def test_config_rejects_meaningless_combinations(keys, match):
    with pytest.raises(ValueError, match=match):
        AlgorithmConfig(**keys)


def test_config_accepts_the_documented_recipes():
    base = AlgorithmConfig(off_policy="decoupled", rollout_mask="geometric")
    replace(base, rollout_mask_high=1.001)
    AlgorithmConfig(rollout_mask="token", rollout_mask_low=0.5, rollout_mask_high=5.0,
                    tis_mode="token", tis_cap=5.0)  # fmt: skip  # IcePop's exact objective
    AlgorithmConfig(off_policy="bypass", behav_weight_cap=0.0)
