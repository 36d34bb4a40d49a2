"""One call signature for every policy loss, for trainers and the verl plug-in."""

from __future__ import annotations

import inspect
from collections.abc import Callable

from torch import Tensor

from .baselines import cw_grpo_loss, dr_grpo_loss, grpo_loss, rloo_loss
from .pacs import pacs_loss

__all__ = ["POLICY_LOSSES", "compute_policy_loss", "policy_loss_options"]

POLICY_LOSSES: dict[str, Callable[..., tuple[Tensor, dict[str, float]]]] = {
    "pacs": pacs_loss,
    "grpo": grpo_loss,
    "dr_grpo": dr_grpo_loss,
    "rloo": rloo_loss,
    "cw_grpo": cw_grpo_loss,
}

# Arguments compute_policy_loss fills itself; everything else a loss accepts is an "option".
_BATCH_ARGS = ("logp", "old_logp", "ref_logp", "mask", "rewards", "group_size")


def policy_loss_options(name: str) -> dict[str, object]:
    """The options (keyword arguments beyond the batch tensors) loss ``name`` accepts, with defaults."""
    fn = _lookup(name)
    params = inspect.signature(fn).parameters
    return {k: p.default for k, p in params.items() if k not in _BATCH_ARGS}


def _lookup(name: str) -> Callable[..., tuple[Tensor, dict[str, float]]]:
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; choose one of {sorted(POLICY_LOSSES)}.")
    return POLICY_LOSSES[name]


def compute_policy_loss(
    name: str,
    *,
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    ref_logp: Tensor | None = None,
    **options: object,
) -> tuple[Tensor, dict[str, float]]:
    """Compute policy loss ``name`` on one batch of whole groups.

    logp, old_logp, mask (and ref_logp): (B, T); rewards: (B,); B = groups × group_size, groups contiguous.
    "pacs": the reference log-probs are ``ref_logp`` if given, else ``old_logp`` (the authors' "old"
    reference: the policy that generated the rollouts); options beta / score / weighted.
    Other names: options are the loss's own keyword arguments (clip_eps, kl_coef, ...); ``ref_logp`` is
    passed through for the KL term. Unknown names or options raise ValueError listing the valid ones.
    """
    fn = _lookup(name)
    valid = policy_loss_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for policy loss {name!r}; valid options: {sorted(valid)}."
        )
    if name == "pacs":
        ref = old_logp if ref_logp is None else ref_logp
        return fn(logp, ref, mask, rewards, group_size, **options)
    return fn(logp, old_logp, mask, rewards, group_size, ref_logp=ref_logp, **options)
