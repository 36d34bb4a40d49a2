"""The algorithm core of pacs-rl: pure PyTorch, no import from the rest of the package.

PACS (reward proxy, group scores, class-balance weights, BCE loss) and the baselines it is compared
against (GRPO, Dr. GRPO, RLOO, CW-GRPO, PPO pieces), all as functions over (B, T) tensors. See
docs/ALGORITHMS.md for the equations and conventions.
"""

from .baselines import (
    LOSS_AGG_MODES,
    aggregate_token_loss,
    clipped_surrogate,
    compute_gae,
    covariance_weights,
    cw_grpo_loss,
    dr_grpo_loss,
    grpo_loss,
    k3_kl,
    outcome_token_rewards,
    ppo_policy_loss,
    ppo_value_loss,
    rloo_loss,
)
from .masked import finite_groups, masked_mean, masked_sum, masked_var, masked_whiten
from .pacs import SCORE_METHODS, class_balance_weights, group_auc, group_scores, pacs_loss, reward_proxy
from .registry import (
    CRITIC_LOSSES,
    LOSS_LABELS,
    POLICY_LOSSES,
    compute_policy_loss,
    loss_names,
    policy_loss_options,
    register_policy_loss,
)

__all__ = [
    "CRITIC_LOSSES",
    "LOSS_AGG_MODES",
    "LOSS_LABELS",
    "POLICY_LOSSES",
    "SCORE_METHODS",
    "aggregate_token_loss",
    "class_balance_weights",
    "clipped_surrogate",
    "compute_gae",
    "compute_policy_loss",
    "covariance_weights",
    "cw_grpo_loss",
    "dr_grpo_loss",
    "finite_groups",
    "group_auc",
    "group_scores",
    "grpo_loss",
    "k3_kl",
    "loss_names",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "outcome_token_rewards",
    "pacs_loss",
    "policy_loss_options",
    "ppo_policy_loss",
    "ppo_value_loss",
    "register_policy_loss",
    "reward_proxy",
    "rloo_loss",
]
