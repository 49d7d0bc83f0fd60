"""Every estimator, loss, aggregation, KL estimator and the KL controller that shares a name
with verl gives verl's numbers on fixed inputs, to 1e-7 (float64).

The expected values in `verl_golden.json` were produced by verl's own `core_algos` (version
recorded in the file) by `make_verl_golden.py`; inputs are stored beside them. The inputs are
single-turn right-padded rows, verl's layout: on multi-turn rows with tool tokens agentrl
deliberately differs (see docs/algorithms.md, "Multi-turn: holes in the mask").
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from agentrl.algorithms import (
    AdvantageInput,
    KLController,
    aggregate_loss,
    compute_advantages,
    get_policy_loss,
    kl_penalty,
    value_loss,
)
from agentrl.config.schema import AlgorithmConfig

GOLDEN = json.loads(Path(__file__).with_name("verl_golden.json").read_text())
TOL = 1e-7
X = {k: torch.tensor(v, dtype=torch.float64) for k, v in GOLDEN["inputs"].items()}


def close(got, want) -> None:
    got = got.detach().double().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    np.testing.assert_allclose(got, np.asarray(want, dtype=np.float64), rtol=0, atol=TOL)


def test_golden_file_is_from_verl_0_9() -> None:
    assert GOLDEN["verl_version"].startswith("0.9")


def advantage_input(**extra) -> AdvantageInput:
    return AdvantageInput(
        token_rewards=X["rewards"],
        mask=X["mask"],
        group_index=X["groups"].long(),
        values=X["values"],
        old_log_probs=X["old_log_probs"],
        baseline_rewards=X["baseline_rewards"],
        sum_pi_squared=X["sum_pi_squared"],
        **extra,
    )


# verl key -> (agentrl estimator, config kwargs, also compare returns)
ESTIMATORS = {
    "gae": ("gae", {"gamma": 0.99, "lam": 0.95}, True),
    "grpo/norm=True": ("grpo", {}, False),
    "grpo/norm=False": ("grpo", {"norm_adv_by_std": False}, False),
    "grpo_passk/norm=True": ("grpo_passk", {}, False),
    "grpo_passk/norm=False": ("grpo_passk", {"norm_adv_by_std": False}, False),
    "rloo": ("rloo", {}, False),
    "opo": ("opo", {}, False),
    "remax": ("remax", {}, False),
    "reinforce_plus_plus": ("reinforce_plus_plus", {}, True),
    "reinforce_plus_plus_baseline": ("reinforce_plus_plus_baseline", {}, False),
    "gpg": ("gpg", {}, False),
}
ESTIMATORS |= {
    f"optimal_token_baseline/tail={tail}/is={isw}": (
        "optimal_token_baseline",
        {"otb_zero_tail": tail == "True", "_is": isw == "True"},
        True,
    )
    for tail in ("True", "False")
    for isw in ("False", "True")
}


@pytest.mark.parametrize("key", sorted(ESTIMATORS))
def test_estimator_matches_verl(key: str) -> None:
    name, kwargs, with_returns = ESTIMATORS[key]
    kwargs = dict(kwargs)
    extra = {"is_weights": X["is_weights"]} if kwargs.pop("_is", False) else {}
    adv, ret = compute_advantages(
        advantage_input(**extra), AlgorithmConfig(adv_estimator=name, **kwargs)
    )
    want_adv, want_ret = GOLDEN["estimators"][key]
    m = X["mask"].numpy()  # verl's whitening leaves padding non-zero; padding is never trained
    close(adv, np.asarray(want_adv) * m)
    assert (adv.numpy()[m == 0] == 0).all()
    if with_returns:
        close(ret, np.asarray(want_ret) * m)


def test_dr_grpo_is_verls_grpo_without_std() -> None:
    adv, _ = compute_advantages(advantage_input(), AlgorithmConfig(adv_estimator="dr_grpo"))
    close(adv, GOLDEN["estimators"]["grpo/norm=False"][0])


# verl loss_mode -> (agentrl policy_loss, AlgorithmConfig kwargs)
LOSSES = {
    "vanilla": ("ppo_clip", {"dual_clip_c": 3.0}),  # verl always dual-clips (clip_ratio_c 3)
    "gspo": ("gspo", {"clip_low": 3e-4, "clip_high": 4e-4}),
    "sapo": ("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
    "gpg": ("gpg", {}),
    "cispo": ("cispo", {"clip_low": 1.0, "clip_high": 0.5}),
    "geo_mean": ("geo_mean", {"clip_low": 0.4, "clip_high": 0.4}),
    "kl_cov": ("kl_cov", {"kl_cov_ratio": 0.05, "ppo_kl_coef": 0.1}),
    "clip_cov": ("clip_cov", {"clip_cov_ratio": 0.05, "clip_cov_lb": 0.05, "clip_cov_ub": 5.0}),
}


@pytest.mark.parametrize("key", sorted(GOLDEN["losses"]))
def test_policy_loss_value_and_gradient_match_verl(key: str) -> None:
    mode, agg, isw = key.split("/")
    name, kwargs = LOSSES[mode]
    cfg = AlgorithmConfig(
        policy_loss=name,
        loss_agg_mode=agg,
        **({"clip_low": 0.2, "clip_high": 0.28} | kwargs),
    )
    lp = X["log_probs"].clone().requires_grad_()
    torch.manual_seed(7)  # clip_cov draws its dropped tokens from torch's global RNG, as verl
    loss, metrics = get_policy_loss(name)(
        lp,
        X["old_log_probs"],
        X["advantages"],
        X["mask"],
        cfg,
        is_weights=X["is_weights"] if isw == "is=True" else None,
    )
    (grad,) = torch.autograd.grad(loss, lp)
    if mode == "gspo":  # agentrl's GSPO always aggregates as the paper (verl 0.9 honours the
        key = f"gspo/seq-mean-token-mean/{isw}"  # mode); the importer warns about it
    want = GOLDEN["losses"][key]
    close(loss, want["loss"])
    close(grad, want["grad"])
    assert all(np.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("key", sorted(GOLDEN["aggregation"]))
def test_aggregation_matches_verl(key: str) -> None:
    mode, _, scale = key.partition("/scale=")
    loss_mat = X["advantages"] * X["log_probs"]
    got = aggregate_loss(loss_mat, X["mask"], mode, float(scale or 0))
    close(got, GOLDEN["aggregation"][key])


@pytest.mark.parametrize(("verl", "ours"), [("kl", "k1"), ("abs", "abs"), ("mse", "k2")])
def test_kl_estimators_match_verl(verl: str, ours: str) -> None:
    got = kl_penalty(X["log_probs"], X["ref_log_probs"], ours)
    close(got, GOLDEN["other"][f"kl/{verl}"])


def test_low_var_kl_matches_verl() -> None:
    got = kl_penalty(X["log_probs"], X["ref_log_probs"], "low_var_kl")
    close(got, GOLDEN["other"]["kl/low_var_kl"])


@pytest.mark.parametrize("clip", [0.2, 0.5])
def test_value_loss_matches_verl(clip: float) -> None:
    vpred = X["values"] + 0.3 * X["advantages"]
    loss, metrics = value_loss(vpred, X["values"], X["advantages"], X["mask"], clip)
    want_loss, want_frac = GOLDEN["other"][f"value/clip={clip}"]
    close(loss, want_loss)
    close(metrics["vf_clip_frac"], want_frac)


def test_adaptive_kl_controller_matches_verl() -> None:
    ctrl = KLController(0.05, adaptive=True, target=0.1, horizon=200)
    trace = [ctrl.update(kl, 16) for kl in (0.3, 0.05, 0.11, 0.0, 0.1)]
    close(trace, GOLDEN["other"]["adaptive_kl/coef=0.05/target=0.1/horizon=200/n=16"])
