"""The 0/1 labels and group ids that the verl ``pacs`` estimator hands to the ``pacs`` loss through verl's
``advantages`` tensor, as one self-checking integer code per row (torch only, no verl import).

verl's policy-loss interface gives the loss no reward and no prompt id, only ``advantages``; so the
estimator writes, constant over the row's response tokens,

    code_i = 4 · g_i + 2 · R_i + 1        g_i = ordinal of the row's uid in the batch, R_i ∈ {0, 1}     (A)

and the loss decodes R_i = (code_i div 2) mod 2, g_i = code_i div 4. Every code is odd, and that is the
self-check: float32 holds every integer below 2^24 exactly, but a round trip through a narrower float
rounds an integer beyond its exact range (256 for bf16, 2048 for fp16) to a multiple of 2 or more, i.e. to
an even number, which no valid code is. So a down-cast anywhere between the estimator and the loss either
leaves a code intact (it was small enough) or makes it even and is refused; it can never flip a label or
move a row to another group silently. (A plain 2·g + R code would turn 257 into 256 under bf16, R = 1 → 0,
and still decode.) The loss also refuses advantages that arrive in any dtype but float32 / float64.
"""

from __future__ import annotations

import torch

__all__ = ["MAX_GROUPS", "decode_labels", "encode_labels"]

_MAX_CODE = 2**24  # float32 holds every integer below this exactly
MAX_GROUPS = (_MAX_CODE - 3) // 4 + 1  # groups per rollout batch whose codes stay below 2^24
_EXACT_DTYPES = (torch.float32, torch.float64)


def encode_labels(
    rewards: torch.Tensor, group_ids: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """Eq. (A): advantages (B, T) = (4 · group_ids + 2 · rewards + 1) on response tokens, 0 elsewhere.

    rewards: (B,) in {0, 1}; group_ids: (B,) int in [0, MAX_GROUPS); response_mask: (B, T). float32.
    """
    if group_ids.numel() and int(group_ids.max()) >= MAX_GROUPS:
        raise ValueError(
            f"group id {int(group_ids.max())}: PACS label codes stay exact in float32 for at most {MAX_GROUPS} "
            "groups per rollout batch; use a smaller data.train_batch_size."
        )
    code = (4 * group_ids.to(torch.float64) + 2 * rewards.to(torch.float64) + 1).to(torch.float32)  # (B,)
    return code[:, None] * response_mask.to(torch.float32)


def decode_labels(advantages: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`encode_labels` for rows with at least one response token.

    advantages, response_mask: (B, T) → (rewards (B,) float in {0, 1}, group_ids (B,) int64); rows with an
    empty mask (verl's padding rows) get group id −1. Raises ValueError when ``advantages`` is not float32 /
    float64, or does not hold eq.-(A) codes: the ``pacs`` estimator did not write it, or a cast to a narrower
    float rounded it (an even code).
    """
    if advantages.dtype not in _EXACT_DTYPES:
        raise ValueError(
            f"the 'pacs' policy loss got advantages of dtype {advantages.dtype}; the PACS label codes (up to "
            f"4·groups + 3) need float32 or float64 (bf16 is exact only up to 256, fp16 up to 2048). Keep "
            "verl's advantages in float32 between the 'pacs' estimator and the loss."
        )
    mask = response_mask.bool()
    has_tokens = mask.any(dim=-1)
    adv = torch.where(mask, advantages.detach().to(torch.float64), torch.zeros((), dtype=torch.float64))
    count = mask.sum(dim=-1).clamp(min=1)
    code = adv.sum(dim=-1) / count  # (B,)
    spread = torch.where(mask, (adv - code[:, None]).abs(), torch.zeros((), dtype=torch.float64)).amax(dim=-1)
    integral = (spread == 0) & (code == code.round()) & (code >= 1) & (code < _MAX_CODE)
    odd = torch.remainder(code, 2) == 1
    bad = has_tokens & ~(integral & odd)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        rounded = bool((has_tokens & integral & ~odd).any())
        why = (
            " Some codes are even, which a valid code never is: the advantages went through a narrower float "
            "(bf16 / fp16) and were rounded; keep them in float32."
            if rounded
            else ""
        )
        raise ValueError(
            f"the 'pacs' policy loss found advantages that are not PACS label codes (row {row}: "
            f"{advantages[row][mask[row]][:4].tolist()}...).{why} The loss reads the 0/1 outcome labels that the "
            "'pacs' advantage estimator writes: set algorithm.adv_estimator=pacs together with "
            "actor_rollout_ref.actor.policy_loss.loss_mode=pacs, and do not transform advantages in between."
        )
    code = code.round().to(torch.int64)
    rewards = ((code // 2) % 2).to(advantages.dtype)
    group_ids = torch.where(has_tokens, code // 4, torch.full_like(code, -1))
    return rewards, group_ids
