"""The algorithm core of pacs-rl: pure PyTorch (and numpy); of the rest of the package it imports only
`pacs_rl.lazy`, for its face.

PACS (reward proxy, group scores, class-balance weights, BCE loss) and the baselines it is compared
against (GRPO, Dr. GRPO, RLOO, CW-GRPO, PPO pieces), all as functions over (B, T) tensors; the options of the
losses declared as plain data (:mod:`.options`); the pass@k estimator (:mod:`.passk`, eq. 10). See
docs/ALGORITHMS.md for the equations and conventions.

Names load on first use, and the first one loads every loss (each fills the registry as it loads), so that
the modules without torch (:mod:`.options`, read by the commands before torch loads, and :mod:`.passk`) can be
imported on their own: ``from pacs_rl.algorithms.options import PACS_OPTIONS``.
"""

from __future__ import annotations

from pacs_rl.lazy import lazy_face

_EXPORTS = {
    "LOSS_AGG_MODES": "options",
    "PACS_OPTIONS": "options",
    "SCORE_METHODS": "options",
    "LossOption": "options",
    "aggregate_token_loss": "baselines",
    "clipped_surrogate": "baselines",
    "compute_gae": "baselines",
    "covariance_weights": "baselines",
    "cw_grpo_loss": "baselines",
    "dr_grpo_loss": "baselines",
    "grpo_loss": "baselines",
    "k3_kl": "baselines",
    "outcome_token_rewards": "baselines",
    "ppo_policy_loss": "baselines",
    "ppo_value_loss": "baselines",
    "rloo_loss": "baselines",
    "finite_groups": "masked",
    "masked_mean": "masked",
    "masked_sum": "masked",
    "masked_var": "masked",
    "masked_whiten": "masked",
    "class_balance_weights": "pacs",
    "group_auc": "pacs",
    "group_scores": "pacs",
    "pacs_loss": "pacs",
    "reward_proxy": "pacs",
    "mean_pass_at_k": "passk",
    "pass_at_k": "passk",
    "CRITIC_LOSSES": "registry",
    "LOSS_LABELS": "registry",
    "POLICY_LOSSES": "registry",
    "compute_policy_loss": "registry",
    "loss_names": "registry",
    "policy_loss_options": "registry",
    "register_policy_loss": "registry",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS, load_first=("baselines", "pacs"))
