"""The algorithm rules of `agentrl config import-verl`: estimator, policy loss, aggregation,
clipping and KL keys (`algorithm.*` and the actor's loss keys).

Kept apart from the other sections' rules (`_rules`) because it is where agentrl and
verl share names: each mapped name must mean what it means in verl (checked number for number
in tests/algorithms/test_verl_parity.py), and where agentrl trains differently the report
says so (`ImportResult.warnings`).
"""

from __future__ import annotations

from ._rules import A, Ctx

ADV_ESTIMATORS = {
    "gae": "gae",
    "grpo": "grpo",
    "grpo_vectorized": "grpo",
    "rloo": "rloo",
    "rloo_vectorized": "rloo",
    "opo": "opo",
    "remax": "remax",
    "reinforce_plus_plus": "reinforce_plus_plus",
    "reinforce_plus_plus_baseline": "reinforce_plus_plus_baseline",
    "grpo_passk": "grpo_passk",
    "gpg": "gpg",
    "optimal_token_baseline": "optimal_token_baseline",
    # agentrl's optimal baseline aligns steps by trained-token index, as verl's TIR variant.
    "tir_optimal_token_baseline": "optimal_token_baseline",
}
POLICY_LOSSES = {"vanilla": "ppo_clip", "gspo": "gspo", "cispo": "cispo", "sapo": "sapo"}
POLICY_LOSSES |= {k: k for k in ("gpg", "clip_cov", "kl_cov", "geo_mean")}
# verl actor keys of the policy losses, copied when present (verl's defaults are agentrl's).
LOSS_KNOBS = {
    "tau_pos": "algorithm.tau_pos",
    "tau_neg": "algorithm.tau_neg",
    "policy_loss.clip_cov_ratio": "algorithm.clip_cov_ratio",
    "policy_loss.clip_cov_lb": "algorithm.clip_cov_lb",
    "policy_loss.clip_cov_ub": "algorithm.clip_cov_ub",
    "policy_loss.kl_cov_ratio": "algorithm.kl_cov_ratio",
    "policy_loss.ppo_kl_coef": "algorithm.ppo_kl_coef",
}
VERL_DUAL_CLIP_C = 3.0  # verl's clip_ratio_c default: its PPO loss always dual-clips
KL_ESTIMATORS = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2"}
KL_ESTIMATORS |= {"low_var_kl": "low_var_kl", "k3": "k3"}
AGG_MODES = {"token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean"}
AGG_MODES |= {"seq-mean-token-sum-norm"}


def algorithm(c: Ctx) -> None:
    est = c.get("algorithm.adv_estimator")
    if est is not None:
        if est in ADV_ESTIMATORS:
            c.put("algorithm.adv_estimator", ADV_ESTIMATORS[est])
        else:
            c.unmapped("algorithm.adv_estimator", f"no agentrl estimator for {est!r}")
    c.direct(
        {
            "algorithm.gamma": ("algorithm.gamma", float),
            "algorithm.lam": ("algorithm.lam", float),
            "algorithm.norm_adv_by_std_in_grpo": ("algorithm.norm_adv_by_std", bool),
        }
    )
    if c.get("algorithm.use_kl_in_reward"):
        _kl(c, "reward", "algorithm.kl_ctrl.kl_coef", "algorithm.kl_penalty")
        _kl_ctrl(c)
    else:
        for key in ("algorithm.kl_ctrl", "algorithm.kl_penalty"):
            c.inactive(key, "use_kl_in_reward is false")
    if c.get("algorithm.filter_groups.enable"):
        c.put("algorithm.dynamic_sampling", True)
        c.get("algorithm.filter_groups.metric")  # agentrl filters on the episode reward
        n = c.get("algorithm.filter_groups.max_num_gen_batches", 0)
        c.put("algorithm.max_resample_batches", int(n) if n and n > 0 else 10)
        if not n or n <= 0:
            c.result.notes.append("filter_groups.max_num_gen_batches<=0 (unbounded) -> 10")
    c.inactive("algorithm.filter_groups", "filter_groups.enable is false")


def _kl_ctrl(c: Ctx) -> None:
    """verl's `algorithm.kl_ctrl` (in-reward KL only) → `algorithm.kl.ctrl/target_kl/horizon`."""
    ctrl = c.get("algorithm.kl_ctrl.type", "fixed")
    if ctrl not in ("fixed", "adaptive"):
        c.unmapped("algorithm.kl_ctrl.type", f"no agentrl KL controller {ctrl!r}")
        return
    if c.result.config.get("algorithm", {}).get("kl", {}).get("placement") != "reward":
        return  # the loss KL was kept instead (see _kl); its keys are reported there
    c.put("algorithm.kl.ctrl", ctrl)
    if ctrl == "adaptive":
        c.put("algorithm.kl.target_kl", float(c.get("algorithm.kl_ctrl.target_kl", 0.1)))
        c.put("algorithm.kl.horizon", int(c.get("algorithm.kl_ctrl.horizon", 10000)))
    else:
        c.inactive("algorithm.kl_ctrl", "kl_ctrl.type is fixed")


def _kl(c: Ctx, placement: str, coef_key: str, type_key: str) -> None:
    """One KL term: agentrl has a single `algorithm.kl` with a placement."""
    if c.result.config.get("algorithm", {}).get("kl"):
        c.unmapped(coef_key, "KL both in reward and in loss; agentrl keeps the reward one")
        c.unmapped(type_key, "see " + coef_key)
        return
    kind = str(c.get(type_key, "low_var_kl"))
    base = kind.rstrip("+")
    if base not in KL_ESTIMATORS:
        c.unmapped(type_key, f"no agentrl KL estimator for {kind!r}")
        base = "low_var_kl"
    elif base != kind:
        c.result.notes.append(f"{type_key}={kind!r}: straight-through '+' dropped, using {base}")
    c.put("algorithm.kl", {"coef": float(c.get(coef_key, 0.0)), "estimator": KL_ESTIMATORS[base]})
    c.put("algorithm.kl.placement", placement)


def policy(c: Ctx) -> None:
    """The actor's loss keys: clip ranges, dual clip, aggregation, loss mode and its knobs, and
    the KL loss. verl always dual-clips, so its default clip_ratio_c is written when absent."""
    c.direct({A + "entropy_coeff": ("algorithm.entropy_coef", float)})
    if not c.has(A + "clip_ratio_c"):
        c.result.notes.append(
            f"actor.clip_ratio_c absent: wrote verl's default dual clip {VERL_DUAL_CLIP_C}"
        )
    c.put("algorithm.dual_clip_c", float(c.get(A + "clip_ratio_c", VERL_DUAL_CLIP_C)))
    clip = c.get(A + "clip_ratio")
    low, high = c.get(A + "clip_ratio_low", clip), c.get(A + "clip_ratio_high", clip)
    if low is not None:
        c.put("algorithm.clip_low", float(low))
    if high is not None:
        c.put("algorithm.clip_high", float(high))
    _aggregation(c)
    mode = c.get(A + "policy_loss.loss_mode")
    if mode in POLICY_LOSSES:
        c.put("algorithm.policy_loss", POLICY_LOSSES[mode])
    elif mode is not None:
        c.unmapped(A + "policy_loss.loss_mode", f"no agentrl policy loss {mode!r}")
    if mode == "gspo":
        agg = c.flat.get(A + "loss_agg_mode") or "token-mean"  # verl's default
        if agg != "seq-mean-token-mean":
            c.result.warnings.append(
                f"agentrl's gspo ignores loss_agg_mode (verl's gspo aggregates with {agg!r}); "
                "it always uses seq-mean-token-mean, the GSPO paper's sequence-level mean"
            )
    for src, dst in LOSS_KNOBS.items():
        c.direct({A + src: (dst, float)})
    c.get(A + "calculate_sum_pi_squared")  # agentrl computes Σπ² when the estimator needs it
    if c.get(A + "use_kl_loss"):
        _kl(c, "loss", A + "kl_loss_coef", A + "kl_loss_type")
    else:
        for key in ("kl_loss_coef", "kl_loss_type"):
            c.inactive(A + key, "use_kl_loss is false")


def _aggregation(c: Ctx) -> None:
    agg = c.get(A + "loss_agg_mode")
    if agg in AGG_MODES:
        c.put("algorithm.loss_agg_mode", agg)
    elif agg is not None:
        c.unmapped(A + "loss_agg_mode", f"no agentrl aggregation {agg!r}")
    scale = c.get(A + "loss_scale_factor")
    if scale is not None:
        c.put("algorithm.loss_scale_factor", int(scale))
    elif agg == "seq-mean-token-sum-norm":
        # verl divides by the padded response width, which is data.max_response_length.
        budget = c.flat.get("data.max_response_length")
        if budget:
            c.put("algorithm.loss_scale_factor", int(budget))
            c.result.notes.append(
                f"seq-mean-token-sum-norm: loss_scale_factor={budget} "
                "(verl's padded response width, data.max_response_length)"
            )
