"""The one list of policy losses: each loss registers itself where it is defined, and everything else
(the trainer's config check, ``pacs-rl compare``'s methods, the command-line help, the verl plug-in) reads
the names from here.

    @register_policy_loss("grpo", label="GRPO")
    def grpo_loss(logp, old_logp, mask, rewards, group_size, clip_eps=0.2, ...): ...

A *group loss* takes ``(logp, old_logp, mask, rewards, group_size, **options)`` and is computed by
:func:`compute_policy_loss`. A loss registered with ``needs_critic=True`` (PPO) takes token advantages from
a learned critic instead; it is listed (so trainers and tables know its name) but a trainer with a critic
calls it directly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

__all__ = [
    "CRITIC_LOSSES",
    "LOSS_LABELS",
    "POLICY_LOSSES",
    "compute_policy_loss",
    "loss_names",
    "policy_loss_options",
    "register_policy_loss",
]

LossFn = Callable[..., tuple[Tensor, dict[str, float]]]

POLICY_LOSSES: dict[str, LossFn] = {}  # group losses, computed by compute_policy_loss
CRITIC_LOSSES: dict[str, LossFn] = {}  # losses on critic advantages (PPO)
LOSS_LABELS: dict[str, str] = {}  # name -> how the paper's tables write it


@dataclass(frozen=True)
class _Registration:
    name: str
    label: str
    needs_critic: bool

    def __call__(self, fn: LossFn) -> LossFn:
        if self.name in LOSS_LABELS:
            raise ValueError(f"a policy loss named {self.name!r} is already registered; choose another name.")
        (CRITIC_LOSSES if self.needs_critic else POLICY_LOSSES)[self.name] = fn
        LOSS_LABELS[self.name] = self.label
        return fn


def register_policy_loss(name: str, label: str, needs_critic: bool = False) -> _Registration:
    """Decorator: register ``fn`` as policy loss ``name``; ``label`` is its row name in results tables."""
    return _Registration(name, label, needs_critic)


def loss_names() -> tuple[str, ...]:
    """Every registered loss: the group losses, then those that need a critic."""
    return (*POLICY_LOSSES, *CRITIC_LOSSES)


# Arguments compute_policy_loss fills itself (tensors of the batch); everything else a loss accepts is an
# "option". scored and is_weights are optional per-row inputs that only some losses take.
_BATCH_ARGS = ("logp", "old_logp", "ref_logp", "mask", "rewards", "group_size", "scored", "is_weights")


def policy_loss_options(name: str) -> dict[str, object]:
    """The options (keyword arguments beyond the batch tensors) loss ``name`` accepts, with defaults."""
    params = inspect.signature(_lookup(name)).parameters
    return {k: p.default for k, p in params.items() if k not in _BATCH_ARGS}


def _lookup(name: str) -> LossFn:
    if name not in POLICY_LOSSES:
        hint = (
            f" ({name!r} needs a learned critic: train it with pacs_rl.training.ppo.PPOTrainer)"
            if name in CRITIC_LOSSES
            else ""
        )
        raise ValueError(f"unknown policy loss {name!r}; choose one of {sorted(POLICY_LOSSES)}{hint}.")
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
    scored: Tensor | None = None,
    is_weights: Tensor | None = None,
    **options: object,
) -> tuple[Tensor, dict[str, float]]:
    """Compute policy loss ``name`` on one batch of whole groups.

    logp, old_logp, mask (and ref_logp): (B, T); rewards: (B,); B = groups × group_size, groups contiguous.
    "pacs": the reference log-probs are ``ref_logp`` if given, else ``old_logp`` (the authors' "old"
    reference: the policy that generated the rollouts); options beta / score / weighted.
    Other names: options are the loss's own keyword arguments (clip_eps, kl_coef, loss_agg_mode, ...);
    ``ref_logp`` is passed through for the KL term. Unknown names or options raise ValueError listing the
    valid ones.
    scored (B,) bool: False marks a completion no reward function could score (the baselines leave it out of
    the group baseline, TRL's rule). is_weights (B, T) or (B, 1): the vLLM importance-sampling ratio that
    multiplies a clipped loss's token losses. PACS takes neither: it labels every row (an unscorable one
    0) and has no ratio to correct, so an unscored row or any is_weights is refused for "pacs".
    """
    fn = _lookup(name)
    valid = policy_loss_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for policy loss {name!r}; valid options: {sorted(valid)}."
        )
    if name == "pacs":
        if is_weights is not None:
            raise ValueError(
                "policy loss 'pacs' has no importance ratio to correct (nor had the authors' PACS), yet is_weights "
                "was given; set vllm_importance_sampling_correction=False."
            )
        if scored is not None and not bool(scored.bool().all()):
            raise ValueError(
                "policy loss 'pacs' needs a 0/1 label for every row of a group (ψ_i compares each row with all the "
                "others, eq. 7), yet scored marks some rows unscored; label them (0 when unverifiable)."
            )
        ref = old_logp if ref_logp is None else ref_logp
        return fn(logp, ref, mask, rewards, group_size, **options)
    rows = {"scored": scored, "is_weights": is_weights}
    params = inspect.signature(fn).parameters
    for key, value in rows.items():
        if value is not None:
            if key not in params:
                raise ValueError(f"policy loss {name!r} does not take {key}; leave it None for this loss.")
            options[key] = value
    return fn(logp, old_logp, mask, rewards, group_size, ref_logp=ref_logp, **options)
