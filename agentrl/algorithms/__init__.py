"""RL algorithms as pure torch functions over `[B, T]` response tensors.

Advantage estimators and policy losses live in name registries so that config strings
(`algorithm.adv_estimator`, `algorithm.policy_loss`) pick them and new ones plug in with a
decorator. See docs/algorithms.md for formulas and config keys.
"""

# Modules that only register estimators/losses (imported for that side effect).
from agentrl.algorithms import cov_losses, optimal_baseline, surrogates  # noqa: F401
from agentrl.algorithms.advantages import (
    ADV_ESTIMATORS,
    AdvantageInput,
    Estimator,
    compute_advantages,
    get_adv_estimator,
    get_estimator,
    register_adv_estimator,
    whitens_advantages,
)
from agentrl.algorithms.correction import importance_weights, ratio_moments, ratio_spread
from agentrl.algorithms.dapo import filter_groups_by_reward_variance, overlong_penalty
from agentrl.algorithms.kl import kl_penalized_rewards, kl_penalty, measured_kl
from agentrl.algorithms.kl_control import KLController
from agentrl.algorithms.losses import (
    ADDITIVE_AGG_MODES,
    FIXED_AGG_MODES,
    POLICY_LOSSES,
    aggregate_loss,
    entropy_from_logits,
    get_policy_loss,
    policy_agg_mode,
    register_policy_loss,
    value_loss,
)
from agentrl.algorithms.masked import masked_mean, masked_whiten
from agentrl.algorithms.offpolicy import (
    behaviour_weights,
    decoupled_loss,
    off_policy_loss,
    rollout_rejection,
)
from agentrl.algorithms.returns import (
    discounted_returns,
    fold_rewards,
    gae,
    turn_ids_from_mask,
    turn_returns,
)
from agentrl.algorithms.selfplay import sequence_log_probs, spin_loss, sppo_loss

__all__ = [
    "ADDITIVE_AGG_MODES",
    "ADV_ESTIMATORS",
    "FIXED_AGG_MODES",
    "POLICY_LOSSES",
    "AdvantageInput",
    "Estimator",
    "KLController",
    "aggregate_loss",
    "behaviour_weights",
    "compute_advantages",
    "decoupled_loss",
    "discounted_returns",
    "entropy_from_logits",
    "filter_groups_by_reward_variance",
    "fold_rewards",
    "gae",
    "get_adv_estimator",
    "get_estimator",
    "get_policy_loss",
    "importance_weights",
    "ratio_moments",
    "ratio_spread",
    "kl_penalized_rewards",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "measured_kl",
    "off_policy_loss",
    "overlong_penalty",
    "policy_agg_mode",
    "register_adv_estimator",
    "register_policy_loss",
    "rollout_rejection",
    "sequence_log_probs",
    "spin_loss",
    "sppo_loss",
    "turn_ids_from_mask",
    "turn_returns",
    "value_loss",
    "whitens_advantages",
]
