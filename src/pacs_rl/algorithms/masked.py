"""Masked reductions and input checks shared by every loss in :mod:`pacs_rl.algorithms`.

Conventions for all tensors of shape ``(B, T)``: ``mask`` is 1 (or True) on response tokens and 0 on
padding. Padded positions may hold anything, even ``inf`` or ``nan``: every reduction here selects with
``torch.where`` instead of multiplying by the mask, so garbage in padding never reaches a value or a
gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["finite_groups", "masked_mean", "masked_sum", "masked_var", "masked_whiten"]


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Sum of ``x`` over positions where ``mask`` is nonzero.

    x, mask: same shape, e.g. (B, T). dim=None sums everything (0-dim result); dim=-1 gives (B,).
    """
    picked = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return picked.sum() if dim is None else picked.sum(dim=dim)


def masked_mean(
    x: Tensor, mask: Tensor, dim: int | None = None, all_reduce: Callable[[Tensor], Tensor] | None = None
) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero; 0 where nothing is selected.

    x, mask: same shape. dim=None → 0-dim tensor; dim=-1 → (B,) per-row means. ``all_reduce`` (dim=None
    only) sums a tensor over processes, so the mean is over the selected entries of every process.
    """
    if all_reduce is not None:
        if dim is not None:
            raise ValueError("masked_mean: all_reduce needs dim=None (a mean over every entry).")
        total = all_reduce(torch.stack([masked_sum(x, mask), mask.bool().sum().to(x.dtype)]))
        return total[0] / total[1].clamp(min=1)
    count = mask.bool().sum() if dim is None else mask.bool().sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1).to(x.dtype)


def masked_var(
    x: Tensor, mask: Tensor, unbiased: bool = True, all_reduce: Callable[[Tensor], Tensor] | None = None
) -> Tensor:
    """Variance of the selected entries of ``x`` (0-dim), in two passes (mean, then squared deviations).
    Bessel-corrected when ``unbiased``; 0 if fewer than two entries are selected. ``all_reduce`` sums a
    tensor over processes, making it the variance over every process's selected entries."""
    mean = masked_mean(x, mask, all_reduce=all_reduce)
    sq = masked_sum((x - mean) ** 2, mask)
    count = mask.bool().sum()
    if all_reduce is not None:
        sq, count = all_reduce(torch.stack([sq, count.to(sq.dtype)]))
    denom = (count - 1) if unbiased else count
    return torch.where(count > 1, sq / denom.clamp(min=1).to(x.dtype), torch.zeros_like(sq))


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Whiten ``x`` with the mean and (unbiased) variance of its selected entries.

    x, mask: (B, T) → (B, T). Returns (x − mean) / sqrt(var + eps) on selected positions and 0 on
    padding. With ``shift_mean=False`` the mean is added back after scaling (the TRL/verl convention:
    only the spread is normalised).
    """
    mean = masked_mean(x, mask)
    var = masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(mask.bool(), out, torch.zeros((), dtype=out.dtype, device=out.device))


# ----------------------------------------------------------------------------------------------------
# Input checks. Errors name the argument, the value seen, and what to do.
# ----------------------------------------------------------------------------------------------------


def _check_tensor(name: str, x: object) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}.")
    return x


def check_token_tensors(mask: Tensor, **tensors: Tensor | None) -> tuple[int, int]:
    """Check that every given (B, T) tensor has the shape of ``mask``; returns (B, T)."""
    _check_tensor("mask", mask)
    if mask.dim() != 2:
        raise ValueError(
            f"mask must have shape (B, T) = (sequences, response tokens), got shape {tuple(mask.shape)}. "
            "Pass one row per completion."
        )
    for name, x in tensors.items():
        if x is None:
            continue
        _check_tensor(name, x)
        if x.shape != mask.shape:
            raise ValueError(
                f"{name} has shape {tuple(x.shape)} but mask has shape {tuple(mask.shape)}; they must match "
                "(B sequences × T response tokens). Slice both to the response part of the sequence."
            )
    return int(mask.shape[0]), int(mask.shape[1])


def check_rewards(rewards: Tensor, batch: int, binary: bool) -> None:
    """rewards must be (B,), finite, and in {0, 1} when ``binary``."""
    _check_tensor("rewards", rewards)
    if rewards.dim() != 1 or rewards.shape[0] != batch:
        raise ValueError(
            f"rewards has shape {tuple(rewards.shape)} but the token tensors have B={batch} rows; "
            f"rewards must have shape ({batch},), one outcome reward per completion."
        )
    r = rewards.detach()
    if r.is_floating_point() and not bool(torch.isfinite(r).all()):
        bad = int((~torch.isfinite(r)).sum())
        first = int((~torch.isfinite(r)).nonzero()[0, 0])
        raise ValueError(
            f"rewards holds {bad} non-finite value(s) (first at row {first}: {float(r[first])}). "
            "Drop or re-score those completions before computing the loss."
        )
    if binary:
        ok = (r == 0) | (r == 1)
        if not bool(ok.all()):
            first = int((~ok).nonzero()[0, 0])
            raise ValueError(
                f"rewards must be 0 or 1 (PACS treats the reward as a binary label), got {float(r[first])} "
                f"at row {first}. Threshold or binarise the verifier's score first."
            )


def check_groups(batch: int, group_size: object, min_size: int, why: str = "") -> int:
    """B must be a whole number of groups of ``group_size`` contiguous rows."""
    if isinstance(group_size, bool) or not isinstance(group_size, int):
        raise ValueError(f"group_size must be an int, got {group_size!r} ({type(group_size).__name__}).")
    if group_size < min_size:
        raise ValueError(
            f"group_size={group_size} is too small: {why or 'this computation'} needs at least {min_size} "
            "completions per prompt. Sample more completions per prompt (G = 8 in the paper)."
        )
    if batch == 0:
        raise ValueError("the batch is empty (B=0 rows); pass at least one whole group.")
    if batch % group_size != 0:
        raise ValueError(
            f"B={batch} rows is not a multiple of group_size={group_size}: that is {batch // group_size} whole "
            f"group(s) and {batch % group_size} row(s) left over. Keep every group whole in the batch "
            "(shuffle groups, never rows) or fix group_size."
        )
    return batch // group_size


def check_finite(mask: Tensor, **tensors: Tensor | None) -> None:
    """Raise if any response-token entry (mask != 0) of the given tensors is nan/inf. Padding is ignored."""
    m = mask.bool()
    for name, x in tensors.items():
        if x is None or not x.is_floating_point():
            continue
        bad = m & ~torch.isfinite(x.detach())
        if bool(bad.any()):
            row, col = (int(v) for v in bad.nonzero()[0])
            raise ValueError(
                f"{name} holds {int(bad.sum())} non-finite value(s) on response tokens (first at row {row}, "
                f"token {col}: {float(x[row, col])}). Check the forward pass (fp16 overflow?) or drop those rows."
            )


@torch.no_grad()
def finite_groups(mask: Tensor, group_size: int, rewards: Tensor | None = None, **tensors: Tensor) -> Tensor:
    """Which groups are safe to train on: (n_groups,) bool, True when every response-token entry of every
    given (B, T) tensor (and every reward, if given) in the group is finite.

    For trainers that must not crash or be silently skewed by a bad row: select the good groups
    (``rows = finite_groups(...).repeat_interleave(group_size)``), count the dropped ones, report them,
    and compute the loss on the rest. Whole groups are dropped, because ψ needs every row of its group.
    """
    batch, _ = check_token_tensors(mask, **tensors)
    n_groups = check_groups(batch, group_size, 1)
    valid = mask.bool()
    ok = torch.ones(batch, dtype=torch.bool, device=mask.device)
    for x in tensors.values():
        if x.is_floating_point():
            ok &= ~(valid & ~torch.isfinite(x)).any(dim=1)
    if rewards is not None:
        _check_tensor("rewards", rewards)
        if rewards.shape != (batch,):
            raise ValueError(f"rewards has shape {tuple(rewards.shape)}; it must be ({batch},), one per row.")
        if rewards.is_floating_point():
            ok &= torch.isfinite(rewards)
    return ok.reshape(n_groups, group_size).all(dim=1)
