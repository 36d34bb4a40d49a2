"""PACS in verl's own registries: an advantage estimator and a policy loss, both named ``pacs``.

Importing this module registers both (idempotently) in ``verl.trainer.ppo.core_algos``. verl imports it
in every process through the ``verl.plugins`` entry point of pacs-rl (see ``plugin.py``).

How the 0/1 labels reach the loss. verl's policy-loss interface passes per micro-batch only
``old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights``; the
outcome reward and the prompt id (``uid``) are not among them. So the ``pacs`` estimator, which runs on the
driver over the whole rollout batch and does see ``uid``, writes into the ``advantages`` tensor a
self-checking integer code per row, constant over the row's response tokens (see ``labels.py``):

    code_i = 4 · g_i + 2 · R_i + 1      g_i = ordinal of the row's uid in the batch, R_i ∈ {0, 1}      (A)

and the ``pacs`` loss decodes it (refusing any value that is not such a code, e.g. one a bf16 round trip
rounded to an even number), checks that every group present in the micro-batch is whole (``rollout.n``
rows), sorts the rows by g_i (stable) so that groups are contiguous, and calls
:func:`pacs_rl.algorithms.pacs_loss` with π_ref = the rollout ("old") policy:

    r̂_i = β Σ_t mask (log π_θ − log π_old)                 eq. 8
    ψ_i  = r̂_i − mean_{j≠i} r̂_j   (or grpo / dr_grpo)      eq. 7 / 11 / 12
    ℓ    = Σ_i w_i BCEWithLogits(ψ_i, R_i) · dp / N_mini     eq. 9, scaled as verl's agg_loss does

N_mini is verl's global mini-batch size (rows over all ranks): the micro-batch losses summed over the
rank's micro-batches and averaged over ranks give the mean over the mini-batch, as eq. 9 asks.
Codes are exact in float32 up to 2^24, i.e. about 4 million groups per rollout batch.

verl's own optimizer step (not this module) clips the gradient norm at ``actor.optim.clip_grad`` and skips a
step whose norm is not finite; the authors' PACS actor never clipped, so the example configs set
``clip_grad: .inf`` (docs/VERL.md).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos
from verl.workers.config import PolicyLossConfig

from pacs_rl.algorithms import pacs_loss

from .labels import MAX_GROUPS, decode_labels, encode_labels
from .options import PACS_NAME, loss_keywords, policy_loss_config_class

__all__ = [
    "PACSPolicyLossConfig",
    "compute_pacs_label_advantage",
    "compute_pacs_policy_loss",
    "register",
]

logger = logging.getLogger(__name__)


# verl's config class of the PACS fields, generated from their declaration (options.py): select it with
# actor_rollout_ref.actor.policy_loss._target_=pacs_rl.integrations.verl.core.PACSPolicyLossConfig
PACSPolicyLossConfig = policy_loss_config_class(PolicyLossConfig, __name__)


def _pacs_options(config: Any) -> tuple[dict[str, Any], int]:
    """(the PACS loss's keywords, G) from verl's ActorConfig (or a DictConfig of the same shape)."""
    policy_loss = config.get("policy_loss", None) if config is not None else None
    group_size = config.get("rollout_n", None) if config is not None else None
    if group_size is None:
        raise ValueError(
            "the 'pacs' policy loss needs the group size: verl passes it as actor.rollout_n "
            "(from actor_rollout_ref.rollout.n); it is missing from the actor config."
        )
    return loss_keywords(policy_loss), int(group_size)


# ------------------------------------------------------------------------------------------------------
# The advantage estimator: runs once per rollout batch on the driver


def compute_pacs_label_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``pacs``: writes eq.-(A) codes (label + group id), not advantages.

    token_level_rewards: (B, T), the outcome reward on the last response token (verl's convention);
    response_mask: (B, T); index: (B,) the prompt ``uid`` of each row (verl passes it as ``index``).
    Returns (advantages, returns), both (B, T) and equal. Raises ValueError when a reward is not 0 or 1,
    or when ``uid`` is missing.
    """
    if index is None:
        raise ValueError(
            "the 'pacs' advantage estimator needs the prompt id of each row; verl passes it from "
            "non_tensor_batch['uid'], which is missing from this batch."
        )
    if len(index) != token_level_rewards.shape[0]:
        raise ValueError(f"index has {len(index)} entries for {token_level_rewards.shape[0]} rows.")
    rewards = (token_level_rewards * response_mask).sum(dim=-1)  # (B,) outcome reward R_i
    has_tokens = response_mask.bool().any(dim=-1)
    labels = rewards.round()
    bad = has_tokens & (
        ~torch.isfinite(rewards) | ((rewards - labels).abs() > 1e-6) | (labels < 0) | (labels > 1)
    )
    if bool(bad.any()):
        rows = bad.nonzero()[:, 0].tolist()
        raise ValueError(
            f"PACS treats the outcome reward as a 0/1 label, but {len(rows)} of {len(rewards)} rows have another "
            f"reward (rows {rows[:5]}: {rewards[rows[:5]].tolist()}). Use a verifier reward that returns 1.0 "
            "for a correct answer and 0.0 otherwise (custom_reward_function / reward settings), with no "
            "format bonus or penalty."
        )
    labels = torch.where(has_tokens, labels, torch.zeros_like(labels))

    ordinal: dict[Any, int] = {}
    group_ids = torch.tensor([ordinal.setdefault(uid, len(ordinal)) for uid in index], dtype=torch.int64)
    if len(ordinal) > MAX_GROUPS:
        raise ValueError(
            f"{len(ordinal)} groups in one rollout batch: PACS label codes are exact in float32 up to "
            f"{MAX_GROUPS}; use a smaller data.train_batch_size."
        )
    advantages = encode_labels(labels, group_ids, response_mask).to(token_level_rewards.device)
    return advantages, advantages.clone()


# ------------------------------------------------------------------------------------------------------
# The policy loss: runs on each actor worker, once per micro-batch


def _whole_group_order(group_ids: torch.Tensor, group_size: int) -> torch.Tensor:
    """The micro-batch's real rows (not verl padding: group id -1) with each group contiguous, rows in batch
    order; empty for a micro-batch of padding only. Raises ValueError when a group is not whole (``group_size``
    rows): eq. 7 needs every row of a group, so a setting that split or reordered groups stops the run."""
    real = (group_ids >= 0).nonzero()[:, 0]  # rows that are not verl padding (empty response mask)
    if real.numel() == 0:
        return real
    ids, counts = torch.unique(group_ids[real], return_counts=True)
    split = counts != group_size
    if bool(split.any()):
        found = dict(zip(ids[split].tolist()[:5], counts[split].tolist()[:5], strict=True))
        raise ValueError(
            f"a PACS micro-batch must hold whole groups of rollout.n={group_size} rows, but it holds "
            f"{real.numel()} rows with these groups (group: rows) {found}. A verl setting splits or "
            "reorders groups: check actor.use_dynamic_bsz=False, actor.shuffle=False, "
            "trainer.balance_batch=False, trainer.use_v1=False, and ppo_micro_batch_size_per_gpu a "
            "multiple of rollout.n; "
            "pacs_rl.integrations.verl.check_verl_config(config) names the one to change."
        )
    return real[torch.argsort(group_ids[real], stable=True)]


def _global_batch(config: Any, rows: int) -> tuple[Any, int]:
    """(global mini-batch size in rows, dp size) from verl's ``global_batch_info``; without it on one rank, the
    micro-batch's own ``rows`` (the loss is then a plain mean)."""
    info = config.get("global_batch_info", None) or {}
    dp_size = int(info.get("dp_size", 1) or 1)
    global_batch_size = info.get("global_batch_size", None)
    if global_batch_size is None:
        if dp_size > 1:
            raise ValueError("verl did not pass global_batch_size, which the loss needs when dp_size > 1.")
        global_batch_size = rows
    return global_batch_size, dp_size


def compute_pacs_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl policy loss ``pacs``: eq. 9 over the whole groups of one micro-batch.

    old_log_prob, log_prob, advantages, response_mask: (B, T). ``advantages`` must hold the eq.-(A) codes of
    the ``pacs`` estimator, in float32 or float64. ``loss_agg_mode`` is ignored: PACS is a mean over sequences (eq. 9).
    ``config`` is verl's ActorConfig: ``rollout_n`` gives G, ``policy_loss.pacs_*`` the PACS options,
    ``global_batch_info`` the mini-batch normalisation. Returns (loss, metrics) as verl expects.
    """
    if rollout_is_weights is not None:
        raise ValueError(
            "PACS has no importance-sampling term, yet verl passed rollout_is_weights; "
            "set algorithm.rollout_correction.rollout_is=null."
        )
    options, group_size = _pacs_options(config)
    rewards, group_ids = decode_labels(advantages, response_mask)
    order = _whole_group_order(group_ids, group_size)
    if order.numel() == 0:  # a micro-batch of padding only: no loss, as verl's agg_loss gives
        return (log_prob * 0.0).sum(), {}
    loss_mean, metrics = pacs_loss(
        log_prob[order],
        old_log_prob[order],
        response_mask[order],
        rewards[order],
        group_size,
        **options,
    )
    # verl's normalisation (core_algos.agg_loss, seq-mean modes): Σ_i ℓ_i · dp / global_batch_size.
    global_batch_size, dp_size = _global_batch(config, order.numel())
    loss = loss_mean * order.numel() / float(global_batch_size) * dp_size
    # verl averages each metric over micro-batches: the critic's AUC only where it is defined (a mixed group)
    if not metrics.pop("critic_auc_groups"):
        metrics.pop("critic_auc")
    return loss, {f"pacs/{key}": value for key, value in metrics.items()}


# ------------------------------------------------------------------------------------------------------
# Registration


def register() -> None:
    """Register ``pacs`` in verl's advantage-estimator and policy-loss registries. Idempotent."""
    current = core_algos.ADV_ESTIMATOR_REGISTRY.get(PACS_NAME)
    if current is not None and current is not compute_pacs_label_advantage:
        if getattr(current, "__qualname__", "") != compute_pacs_label_advantage.__qualname__:
            logger.warning("replacing verl advantage estimator %r (%s) with pacs-rl's", PACS_NAME, current)
        del core_algos.ADV_ESTIMATOR_REGISTRY[PACS_NAME]  # register_adv_est refuses a second function
    if core_algos.ADV_ESTIMATOR_REGISTRY.get(PACS_NAME) is None:
        core_algos.register_adv_est(PACS_NAME)(compute_pacs_label_advantage)
    core_algos.register_policy_loss(PACS_NAME)(compute_pacs_policy_loss)


register()
