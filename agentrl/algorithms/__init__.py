"""RL algorithms as pure torch functions over `[B, T]` response tensors.

Advantage estimators and policy losses live in name registries so that config strings
(`algorithm.adv_estimator`, `algorithm.policy_loss`) pick them and new ones plug in with a
decorator. See docs/algorithms.md for formulas and config keys.
"""

from agentrl.algorithms.advantages import (
    ADV_ESTIMATORS,
    GREEDY_BASELINE_ESTIMATORS,
    AdvantageInput,
    compute_advantages,
    get_adv_estimator,
    needs_greedy_baseline,
    register_adv_estimator,
)
from agentrl.algorithms.correction import importance_weights
from agentrl.algorithms.dapo import filter_groups_by_reward_variance, overlong_penalty
from agentrl.algorithms.kl import kl_penalized_rewards, kl_penalty
from agentrl.algorithms.losses import (
    POLICY_LOSSES,
    aggregate_loss,
    entropy_from_logits,
    get_policy_loss,
    register_policy_loss,
    value_loss,
)
from agentrl.algorithms.masked import masked_mean, masked_whiten
from agentrl.algorithms.returns import (
    discounted_returns,
    fold_rewards,
    gae,
    turn_ids_from_mask,
    turn_returns,
)
from agentrl.algorithms.selfplay import sequence_log_probs, spin_loss, sppo_loss

__all__ = [
    "ADV_ESTIMATORS",
    "GREEDY_BASELINE_ESTIMATORS",
    "POLICY_LOSSES",
    "AdvantageInput",
    "aggregate_loss",
    "compute_advantages",
    "discounted_returns",
    "entropy_from_logits",
    "filter_groups_by_reward_variance",
    "fold_rewards",
    "gae",
    "get_adv_estimator",
    "get_policy_loss",
    "importance_weights",
    "kl_penalized_rewards",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "needs_greedy_baseline",
    "overlong_penalty",
    "register_adv_estimator",
    "register_policy_loss",
    "sequence_log_probs",
    "spin_loss",
    "sppo_loss",
    "turn_ids_from_mask",
    "turn_returns",
    "value_loss",
]
