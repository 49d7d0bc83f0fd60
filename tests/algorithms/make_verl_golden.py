"""Regenerate `verl_golden.json`: verl's own outputs on fixed inputs, for test_verl_parity.

Not a test (verl is not an agentrl dependency): run it by hand where verl imports, e.g.

    pip download verl==0.9.1 --no-deps -d /tmp/w && python -m zipfile -e /tmp/w/*.whl /tmp/verl
    PYTHONPATH=/tmp/verl python tests/algorithms/make_verl_golden.py

(verl's package __init__ needs tensordict, omegaconf, codetiming and pyvers importable, and a
transformers that still exports AutoModelForVision2Seq.) Inputs are written to the JSON too,
so the parity test never depends on how torch's RNG draws them. Everything is float64:
agreement to 1e-7 then measures the formulas, not float32 rounding.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).with_name("verl_golden.json")
B, T = 8, 12
GROUPS = [0, 0, 0, 0, 1, 1, 1, 1]


def inputs() -> dict[str, torch.Tensor]:
    """Single-turn, right-padded rows (verl's layout): lengths vary, reward on the last token.
    Group 0 has a unique best reward (pass@k); group 1 a tie at the top and a zero reward."""
    gen = torch.Generator().manual_seed(1234)
    lengths = [12, 7, 3, 9, 5, 12, 8, 1]
    mask = torch.zeros(B, T, dtype=torch.float64)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    scores = torch.tensor([1.0, 0.25, -0.5, 0.0, 0.75, 0.75, 0.0, -1.0], dtype=torch.float64)
    rewards = torch.zeros(B, T, dtype=torch.float64)
    for i, n in enumerate(lengths):
        rewards[i, n - 1] = scores[i]
    old = -torch.rand(B, T, generator=gen, dtype=torch.float64) * 2.5
    lp = old + 0.3 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    lp[0, 2] = old[0, 2] + 1.5  # an exploded ratio (dual clip, clip windows)
    lp[3, 1] = old[3, 1] - 1.5
    adv = torch.randn(B, T, generator=gen, dtype=torch.float64) * mask
    values = torch.randn(B, T, generator=gen, dtype=torch.float64) * mask
    sum_pi_sq = torch.rand(B, T, generator=gen, dtype=torch.float64) * 0.5 * mask
    is_w = (0.5 + torch.rand(B, T, generator=gen, dtype=torch.float64)) * mask
    ref = lp - 0.2 * torch.randn(B, T, generator=gen, dtype=torch.float64)
    baseline = torch.tensor([0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    return {
        "mask": mask,
        "rewards": rewards,
        "old_log_probs": old,
        "log_probs": lp,
        "advantages": adv,
        "values": values,
        "sum_pi_squared": sum_pi_sq,
        "is_weights": is_w,
        "ref_log_probs": ref,
        "baseline_rewards": baseline,
    }


def estimators(c, x, index) -> dict[str, list]:
    from verl.trainer.config import AlgoConfig

    r, m = x["rewards"], x["mask"]
    out = {}
    out["gae"] = c.compute_gae_advantage_return(r, x["values"], m, 0.99, 0.95)
    for norm in (True, False):
        cfg = AlgoConfig(norm_adv_by_std_in_grpo=norm)
        out[f"grpo/norm={norm}"] = c.compute_grpo_outcome_advantage(
            r, m, index, norm_adv_by_std_in_grpo=norm
        )
        out[f"grpo_passk/norm={norm}"] = c.compute_grpo_passk_outcome_advantage(
            r, m, index, config=cfg
        )
    out["rloo"] = c.compute_rloo_outcome_advantage(r, m, index)
    out["opo"] = c.compute_opo_outcome_advantage(r, m, index)
    out["remax"] = c.compute_remax_outcome_advantage(r, x["baseline_rewards"], m)
    out["reinforce_plus_plus"] = c.compute_reinforce_plus_plus_outcome_advantage(
        r, m, config=AlgoConfig(gamma=1.0)
    )
    out["reinforce_plus_plus_baseline"] = c.compute_reinforce_plus_plus_baseline_outcome_advantage(
        r, m, index
    )
    out["gpg"] = c.compute_gpg_outcome_advantage(r, m, index)
    for tail in (True, False):
        for isw in (False, True):
            out[f"optimal_token_baseline/tail={tail}/is={isw}"] = (
                c.compute_optimal_token_baseline_advantage(
                    r,
                    m,
                    index,
                    x["old_log_probs"],
                    x["sum_pi_squared"],
                    rollout_is_weights=x["is_weights"] if isw else None,
                    handle_zero_tail=tail,
                )
            )
    return {k: [a.tolist(), b.tolist()] for k, (a, b) in out.items()}


def actor_config(mode: str, agg: str, **kw):
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=kw.pop("clip", 0.2),
        clip_ratio_low=kw.pop("clip_low", 0.2),
        clip_ratio_high=kw.pop("clip_high", 0.28),
        loss_agg_mode=agg,
        policy_loss=PolicyLossConfig(loss_mode=mode, **kw.pop("policy_loss", {})),
        **kw,
    )


LOSS_CASES = {
    # name: (verl loss_mode, agentrl policy_loss, extra ActorConfig kwargs)
    "vanilla": ("vanilla", "ppo_clip", {}),
    "gspo": ("gspo", "gspo", {"clip_low": 3e-4, "clip_high": 4e-4}),
    "sapo": ("sapo", "sapo", {"tau_pos": 1.0, "tau_neg": 1.05}),
    "gpg": ("gpg", "gpg", {}),
    "cispo": ("cispo", "cispo", {"clip_low": 1.0, "clip_high": 0.5}),
    "geo_mean": ("geo_mean", "geo_mean", {"clip_low": 0.4, "clip_high": 0.4}),
    "kl_cov": ("kl_cov", "kl_cov", {"policy_loss": {"kl_cov_ratio": 0.05, "ppo_kl_coef": 0.1}}),
    # Window and ratio chosen so several candidates compete for the dropped slots.
    "clip_cov": (
        "clip_cov",
        "clip_cov",
        {"policy_loss": {"clip_cov_ratio": 0.05, "clip_cov_lb": 0.05, "clip_cov_ub": 5.0}},
    ),
}
AGG_MODES = [
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
]


def losses(c, x) -> dict[str, dict]:
    out = {}
    for name, (mode, _, kw) in LOSS_CASES.items():
        for agg in AGG_MODES:
            for isw in (False, True):
                lp = x["log_probs"].clone().requires_grad_()
                cfg = actor_config(mode, agg, **json.loads(json.dumps(kw)))
                torch.manual_seed(7)  # clip_cov draws with torch's global RNG
                loss, _ = c.get_policy_loss_fn(mode)(
                    old_log_prob=x["old_log_probs"],
                    log_prob=lp,
                    advantages=x["advantages"],
                    response_mask=x["mask"],
                    loss_agg_mode=agg,
                    config=cfg,
                    rollout_is_weights=x["is_weights"] if isw else None,
                )
                (grad,) = torch.autograd.grad(loss, lp)
                out[f"{name}/{agg}/is={isw}"] = {"loss": loss.item(), "grad": grad.tolist()}
    return out


def aggregation(c, x) -> dict[str, float]:
    loss_mat = x["advantages"] * x["log_probs"]
    out = {mode: c.agg_loss(loss_mat, x["mask"], mode).item() for mode in AGG_MODES}
    scaled = c.agg_loss(loss_mat, x["mask"], "seq-mean-token-sum-norm", loss_scale_factor=40)
    out["seq-mean-token-sum-norm/scale=40"] = scaled.item()
    return out


def kl_and_value(c, x) -> dict[str, list]:
    out = {
        f"kl/{k}": c.kl_penalty(x["log_probs"], x["ref_log_probs"], k).tolist()
        for k in ("kl", "abs", "mse", "low_var_kl")
    }
    for clip in (0.2, 0.5):
        vf, frac = c.compute_value_loss(
            x["values"] + 0.3 * x["advantages"], x["advantages"], x["values"], x["mask"], clip
        )
        out[f"value/clip={clip}"] = [vf.item(), float(frac)]
    ctrl = c.AdaptiveKLController(init_kl_coef=0.05, target_kl=0.1, horizon=200)
    trace = []
    for kl in (0.3, 0.05, 0.11, 0.0, 0.1):
        ctrl.update(current_kl=kl, n_steps=16)
        trace.append(ctrl.value)
    out["adaptive_kl/coef=0.05/target=0.1/horizon=200/n=16"] = trace
    return out


def main() -> None:
    import verl.trainer.ppo.core_algos as c

    torch.set_default_dtype(torch.float64)
    x = inputs()
    index = np.array(GROUPS)
    try:
        ver = version("verl")
    except PackageNotFoundError:
        ver = (Path(c.__file__).parents[2] / "version" / "version").read_text().strip()
    golden = {
        "verl_version": ver,
        "inputs": {k: v.tolist() for k, v in x.items()} | {"groups": GROUPS},
        "estimators": estimators(c, x, index),
        "losses": losses(c, x),
        "aggregation": aggregation(c, x),
        "other": kl_and_value(c, x),
    }
    OUT.write_text(json.dumps(golden))
    print(f"wrote {OUT} from verl {ver}", file=sys.stderr)


if __name__ == "__main__":
    main()
