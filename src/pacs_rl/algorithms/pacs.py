"""PACS: the outcome reward as a label, the policy as its classifier (paper §3).

Shapes: B = number of groups × G completions, the G rows of a group contiguous; T = response length.

    r̂_i = β Σ_t mask_t (log π_θ − log π_ref)              eq. 8   reward_proxy
    ψ_i  = r̂_i − 1/(G−1) Σ_{j≠i} r̂_j                      eq. 7   group_scores(method="rloo")
    L    = 1/B Σ_i w_i · BCEWithLogits(ψ_i, R_i)           eq. 9   pacs_loss
    ∂L/∂ψ_i = w_i (σ(ψ_i) − R_i) / B                       eq. 5
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .masked import check_finite, check_groups, check_rewards, check_token_tensors, masked_sum
from .options import SCORE_METHODS
from .registry import register_policy_loss

__all__ = [
    "class_balance_weights",
    "group_auc",
    "group_scores",
    "pacs_loss",
    "reward_proxy",
]


def reward_proxy(logp: Tensor, ref_logp: Tensor, mask: Tensor, beta: float = 1.0) -> Tensor:
    """Eq. 8: r̂_i = β · Σ_t mask_{i,t} (logp_{i,t} − ref_logp_{i,t}).

    logp, ref_logp, mask: (B, T) → (B,). A masked SUM (not a mean) over response tokens; gradient flows
    through ``logp`` (and ``ref_logp`` if it requires grad). Computed in at least fp32.
    """
    check_token_tensors(mask, logp=logp, ref_logp=ref_logp)
    dtype = torch.promote_types(logp.dtype, torch.float32)  # ψ subtracts sums: bf16 (~3 digits) is too coarse
    return beta * masked_sum(logp.to(dtype) - ref_logp.to(dtype), mask, dim=-1)


def group_scores(
    values: Tensor, group_size: int, method: str = "rloo", eps: float = 1e-6, valid: Tensor | None = None
) -> Tensor:
    """Score each value against the other values of its group. Differentiable.

    values: (B,) with B = n_groups × G, groups contiguous → (B,).
      rloo    (eq. 7):  v_i − mean_{j≠i} v_j                  needs G ≥ 2
      grpo    (eq. 11): (v_i − mean_j v_j) / (std_j v_j + eps)  needs G ≥ 2
      dr_grpo (eq. 12): v_i − mean_j v_j
    ``std`` is the unbiased (Bessel-corrected, /(G−1)) standard deviation, as ``torch.std`` computes it and
    as TRL, verl and the PACS authors' code use. A group of equal values has std 0: its scores are 0 and
    the gradient is the one of (v − mean)/eps: finite, but of size 1/eps (see docs/ALGORITHMS.md, it
    matters for PACS with the "old" reference, where every r̂ is 0 at the first update).

    valid: optional (B,) bool. Rows with False are left out of their group's mean, leave-one-out mean and
    std, and score 0, as TRL treats completions no reward function could score; the means and the std are
    then over the k valid rows of the group (a score needing two values scores 0 when k < 2).
    """
    if not isinstance(values, Tensor) or values.dim() != 1:
        shape = tuple(values.shape) if isinstance(values, Tensor) else type(values).__name__
        raise ValueError(f"values must be a 1-D tensor of shape (B,), got {shape}.")
    if method not in SCORE_METHODS:
        raise ValueError(f"unknown score method {method!r}; choose one of {list(SCORE_METHODS)}.")
    min_size = 1 if method == "dr_grpo" else 2
    why = "the leave-one-out baseline (rloo)" if method == "rloo" else "the group std (grpo)"
    n_groups = check_groups(values.shape[0], group_size, min_size, why)
    v = values.reshape(n_groups, group_size)
    if valid is not None:
        return _valid_group_scores(v, _check_valid(valid, values.shape[0]), method, eps).reshape(-1)
    if method == "rloo":
        loo_mean = (v.sum(dim=1, keepdim=True) - v) / (group_size - 1)  # mean of the G−1 others
        out = v - loo_mean  # eq. 7
    else:
        centred = v - v.mean(dim=1, keepdim=True)  # eq. 12
        if method == "dr_grpo":
            out = centred
        else:
            # eq. 11. torch.std is unbiased (/(G−1)); its backward is 0 (not nan) where std = 0.
            std = v.std(dim=1, keepdim=True)
            out = centred / (std + eps)
    return out.reshape(-1)


def _check_valid(valid: Tensor, batch: int) -> Tensor:
    if not isinstance(valid, Tensor) or valid.shape != (batch,):
        shape = tuple(valid.shape) if isinstance(valid, Tensor) else type(valid).__name__
        raise ValueError(f"valid must be a (B,) = ({batch},) bool tensor, one flag per row; got {shape}.")
    return valid.bool()


def _valid_group_scores(v: Tensor, valid: Tensor, method: str, eps: float) -> Tensor:
    """group_scores over the valid rows only. v: (n_groups, G); valid: (B,) → (n_groups, G), 0 where invalid."""
    keep = valid.reshape(v.shape)
    zero = torch.zeros((), dtype=v.dtype, device=v.device)
    k = keep.sum(dim=1, keepdim=True).to(v.dtype)  # valid rows per group
    vk = torch.where(keep, v, zero)
    total = vk.sum(dim=1, keepdim=True)
    if method == "rloo":
        out = v - (total - vk) / (k - 1).clamp(min=1)  # eq. 7 over the k − 1 other valid rows
        return torch.where(keep & (k >= 2), out, zero)
    centred = torch.where(keep, v - total / k.clamp(min=1), zero)  # eq. 12
    if method == "dr_grpo":
        return centred
    var = (centred**2).sum(dim=1, keepdim=True) / (k - 1).clamp(min=1)  # unbiased, over the k rows
    std = var.clamp(min=torch.finfo(var.dtype).tiny).sqrt()  # a finite gradient where var = 0 (centred = 0)
    return torch.where(keep & (k >= 2), centred / (std + eps), zero)  # eq. 11


@torch.no_grad()
def class_balance_weights(rewards: Tensor, group_size: int) -> Tensor:
    """§3.4.2 class-imbalance weights (King & Zeng 2001; sklearn's "balanced" class weight).

    rewards: (B,) in {0, 1}, groups of ``group_size`` contiguous rows → (B,) float, no gradient.
    In a group with both labels, w_i = G / (2 · #rows sharing R_i's label); a group with a single label
    keeps w = 1. E.g. G = 8 with 2 correct: 8/4 = 2.0 for correct rows, 8/12 = 0.667 for incorrect rows.
    """
    if not isinstance(rewards, Tensor) or rewards.dim() != 1:
        shape = tuple(rewards.shape) if isinstance(rewards, Tensor) else type(rewards).__name__
        raise ValueError(f"rewards must be a 1-D tensor of shape (B,), got {shape}.")
    check_rewards(rewards, rewards.shape[0], binary=True)
    n_groups = check_groups(rewards.shape[0], group_size, 1)
    dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    r = rewards.to(dtype).reshape(n_groups, group_size)
    n_pos = r.sum(dim=1, keepdim=True)
    n_neg = group_size - n_pos
    mixed = (n_pos > 0) & (n_neg > 0)
    w_pos = group_size / (2 * n_pos.clamp(min=1))
    w_neg = group_size / (2 * n_neg.clamp(min=1))
    w = torch.where(r == 1, w_pos, w_neg)
    return torch.where(mixed, w, torch.ones_like(w)).reshape(-1)


@torch.no_grad()
def group_auc(scores: Tensor, rewards: Tensor, group_size: int) -> tuple[float, int]:
    """How well the implicit critic ranks its own group: (mean within-group AUC, number of mixed groups).

    scores, rewards: (B,), groups of ``group_size`` contiguous rows; rewards in {0, 1}. For each group with
    both labels, AUC = P(ψ_correct > ψ_wrong) over its (correct, wrong) pairs, a tie counting ½; the mean is
    over those groups (nan when there is none). 0.5 is chance; ψ ≡ 0 (reference = the rollout policy, before
    its first step on the batch) gives exactly 0.5. Within a group ψ is monotone in r̂ for every score method,
    so this is also the AUC of r̂. Unlike accuracy at ψ = 0 it does not move with the share of correct rows.
    """
    n_groups = check_groups(scores.shape[0], group_size, 1)
    s = scores.float().reshape(n_groups, group_size)
    r = rewards.float().reshape(n_groups, group_size)
    pairs = r[:, :, None] * (1 - r[:, None, :])  # (n, G, G): row i correct, column j wrong
    wins = (torch.sign(s[:, :, None] - s[:, None, :]) + 1) / 2  # 1 if ψ_i > ψ_j, ½ on a tie
    n_pairs = pairs.sum(dim=(1, 2))
    mixed = n_pairs > 0
    if not bool(mixed.any()):
        return float("nan"), 0
    auc = (wins * pairs).sum(dim=(1, 2))[mixed] / n_pairs[mixed]
    return float(auc.mean()), int(mixed.sum())


@register_policy_loss("pacs", label="PACS")
def pacs_loss(
    logp: Tensor,
    ref_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    beta: float = 1.0,
    score: str = "rloo",
    weighted: bool = True,
) -> tuple[Tensor, dict[str, float]]:
    """Eq. 9: L = 1/B Σ_i w_i · BCEWithLogits(ψ_i, R_i), ψ from eq. 7 (or 11/12) over r̂ from eq. 8.

    logp:     (B, T) log π_θ of each response token, with gradient.
    ref_logp: (B, T) log π_ref of the same tokens (the rollout policy's in the authors' "old" mode).
    mask:     (B, T) 1 on response tokens, 0 on padding (padding values are ignored, even nan/inf).
    rewards:  (B,) outcome rewards in {0, 1}; groups of ``group_size`` contiguous rows.
    Returns (loss 0-dim tensor, metrics dict of python floats). The mean is over the B sequences, not
    over Σw. Raises ValueError on bad shapes, partial groups, non-binary rewards, nan/inf on response
    tokens.
    """
    if score not in SCORE_METHODS:
        raise ValueError(f"unknown score {score!r} for pacs_loss; choose one of {list(SCORE_METHODS)}.")
    batch, _ = check_token_tensors(mask, logp=logp, ref_logp=ref_logp)
    check_rewards(rewards, batch, binary=True)
    check_groups(batch, group_size, 1 if score == "dr_grpo" else 2, f"the {score} score")
    check_finite(mask, logp=logp, ref_logp=ref_logp)

    r_hat = reward_proxy(logp, ref_logp, mask, beta)  # eq. 8, (B,)
    psi = group_scores(r_hat, group_size, score)  # eq. 7 / 11 / 12, (B,)
    labels = rewards.to(psi.dtype)
    if weighted:
        weights = class_balance_weights(rewards, group_size).to(psi.dtype)  # §3.4.2
    else:
        weights = torch.ones_like(labels)
    # eq. 9 in the log-sigmoid form: stable for |ψ| in the thousands (never log(sigmoid(ψ))).
    per_seq = F.binary_cross_entropy_with_logits(psi, labels, reduction="none")
    loss = (weights * per_seq).mean()  # mean over the B sequences, not over Σw

    with torch.no_grad():
        p = torch.sigmoid(psi)
        stats = {
            "loss": loss.detach(),
            "psi_mean": psi.mean(),
            "psi_std": psi.std(unbiased=False),  # population std over the B sequences
            "psi_abs_max": psi.abs().max(),
            "prob_mean": p.mean(),  # mean predicted P(correct) = σ(ψ)
            "critic_accuracy": ((psi > 0).to(labels.dtype) == labels).to(psi.dtype).mean(),  # σ(ψ)>0.5 ⇔ ψ>0
            "brier": ((p - labels) ** 2).mean(),
            "weight_mean": weights.mean(),
            "reward_proxy_mean": r_hat.mean(),
            "reward_mean": labels.mean(),
        }
        dtype = torch.promote_types(psi.dtype, torch.float32)  # bf16 metrics are reported in fp32
        values = torch.stack([v.reshape(()).to(dtype) for v in stats.values()]).tolist()  # one device sync
        metrics = dict(zip(stats, values, strict=True))
        # nan without a mixed group: the trainer averages it over the micro-batches that have one
        auc, mixed_groups = group_auc(psi, rewards, group_size)
        metrics["critic_auc"], metrics["critic_auc_groups"] = auc, float(mixed_groups)
    return loss, metrics
