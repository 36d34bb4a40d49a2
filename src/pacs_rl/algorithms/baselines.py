"""Baselines the PACS paper compares against, as pure functions over (B, T) tensors.

Every policy loss takes ``logp`` (B, T, with gradient), ``old_logp`` (B, T, the rollout policy),
``mask`` (B, T, 1 on response tokens), ``rewards`` (B,) and ``group_size`` (G rows per prompt,
contiguous), and returns ``(loss, metrics)`` with metrics as python floats.

    ratio ρ_{i,t} = exp(logp − old_logp)
    ℓ_{i,t} = max(−A ρ, −A clip(ρ, 1−ε_low, 1+ε_high))      PPO-clip surrogate (to minimise)
    GRPO     A_i = (R_i − mean R)/(std R + eps)              Appendix A.2, 1/G Σ_i 1/|o_i| Σ_t
    Dr. GRPO A_i = R_i − mean R                              1/G Σ_i Σ_t / L (constant L)
    RLOO     A_i = R_i − mean_{j≠i} R_j                      1/G Σ_i 1/|o_i| Σ_t (same as GRPO)
    CW-GRPO  A_{i,t} = w̃_{i,t} A_i (Gaussian kernel of token covariance, cw_grpo_paper §2.3)
    PPO      A_{i,t} from GAE over a learned critic          Appendix A.1
"""

from __future__ import annotations

import torch
from torch import Tensor

from .masked import (
    check_finite,
    check_groups,
    check_rewards,
    check_token_tensors,
    masked_mean,
    masked_sum,
    masked_var,
)
from .pacs import group_scores
from .registry import register_policy_loss

__all__ = [
    "clipped_surrogate",
    "compute_gae",
    "covariance_weights",
    "cw_grpo_loss",
    "dr_grpo_loss",
    "grpo_loss",
    "k3_kl",
    "outcome_token_rewards",
    "ppo_policy_loss",
    "ppo_value_loss",
    "rloo_loss",
]


# ----------------------------------------------------------------------------------------------------
# building blocks
# ----------------------------------------------------------------------------------------------------


def _check_clip(clip_eps: float, clip_eps_high: float | None) -> tuple[float, float]:
    if not 0.0 <= clip_eps < 1.0:
        raise ValueError(
            f"clip_eps={clip_eps} must be in [0, 1) (the ratio is clipped to [1−ε, 1+ε]); 0.2 is usual."
        )
    high = clip_eps if clip_eps_high is None else clip_eps_high
    if high < 0.0:
        raise ValueError(f"clip_eps_high={clip_eps_high} must be ≥ 0 (or None to reuse clip_eps).")
    return clip_eps, high


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Token-level PPO-clip loss ℓ_{i,t} = max(−A ρ, −A clip(ρ, 1−ε, 1+ε_high)).

    logp, old_logp, advantages, mask: (B, T) → ((B, T) per-token loss, 0 on padding; dict of 0-dim
    detached stats: clip_ratio_low (A<0 and ρ<1−ε: the clip stops a decrease), clip_ratio_high (A>0 and
    ρ>1+ε_high), clip_ratio_region (ρ outside the interval, any A), ratio_mean, approx_kl = mean(old − logp)).
    Fractions are over response tokens. Padding is set to log-ratio 0 before exp, so garbage there is inert.
    Computed in at least fp32 (bf16 inputs are upcast; gradients still reach them).
    """
    low_eps, high_eps = _check_clip(clip_eps, clip_eps_high)
    valid = mask.bool()
    dtype = torch.promote_types(logp.dtype, torch.float32)  # ratios near 1 need more than bf16
    log_ratio = torch.where(
        valid, logp.to(dtype) - old_logp.to(dtype), torch.zeros((), dtype=dtype, device=logp.device)
    )
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - low_eps, 1.0 + high_eps)
    token_loss = torch.maximum(-advantages * ratio, -advantages * clipped)
    token_loss = torch.where(valid, token_loss, torch.zeros_like(token_loss))
    with torch.no_grad():
        below, above = ratio < 1.0 - low_eps, ratio > 1.0 + high_eps
        stats = {
            "clip_ratio_low": masked_mean((below & (advantages < 0)).to(dtype), mask),
            "clip_ratio_high": masked_mean((above & (advantages > 0)).to(dtype), mask),
            "clip_ratio_region": masked_mean((below | above).to(dtype), mask),
            "ratio_mean": masked_mean(ratio, mask),
            "approx_kl": masked_mean(-log_ratio, mask),
        }
    return token_loss, stats


def k3_kl(logp: Tensor, ref_logp: Tensor, mask: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref) (Appendix A.2): exp(ref − logp) − (ref − logp) − 1 ≥ 0.

    logp, ref_logp, mask: (B, T) → (B, T), 0 on padding.
    """
    dtype = torch.promote_types(logp.dtype, torch.float32)
    d = torch.where(
        mask.bool(), ref_logp.to(dtype) - logp.to(dtype), torch.zeros((), dtype=dtype, device=logp.device)
    )
    return torch.exp(d) - d - 1.0


def _seq_mean_token_mean(token_loss: Tensor, mask: Tensor) -> Tensor:
    # 1/B Σ_i 1/|o_i| Σ_t ℓ_{i,t}; a row without response tokens contributes 0.
    return masked_mean(token_loss, mask, dim=-1).mean()


def _to_floats(stats: dict[str, Tensor]) -> dict[str, float]:
    names = list(stats)
    dtype = torch.float32
    for k in names:  # report bf16/fp16 in fp32, keep fp64 as is
        dtype = torch.promote_types(dtype, stats[k].dtype) if stats[k].is_floating_point() else dtype
    values = torch.stack([stats[k].detach().reshape(()).to(dtype) for k in names]).tolist()  # one sync
    return dict(zip(names, values, strict=True))


def _group_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    advantage_method: str,
    clip_eps: float,
    clip_eps_high: float | None,
    kl_coef: float,
    ref_logp: Tensor | None,
    eps: float = 1e-6,
    aggregation: str = "seq_mean_token_mean",
    max_completion_length: int | None = None,
    covariance_weighting: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    """Shared body of the group-advantage baselines (GRPO, Dr. GRPO, RLOO, CW-GRPO)."""
    batch, length = check_token_tensors(mask, logp=logp, old_logp=old_logp, ref_logp=ref_logp)
    check_rewards(rewards, batch, binary=False)
    check_groups(
        batch, group_size, 1 if advantage_method == "dr_grpo" else 2, f"the {advantage_method} advantage"
    )
    if kl_coef < 0:
        raise ValueError(f"kl_coef={kl_coef} must be ≥ 0.")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError(
            f"kl_coef={kl_coef} > 0 needs ref_logp (B, T) from the reference policy; pass it or set kl_coef=0."
        )
    check_finite(mask, logp=logp, old_logp=old_logp, ref_logp=ref_logp)

    with torch.no_grad():  # advantages in at least fp32, also for bf16 log-probs
        adv_dtype = torch.promote_types(logp.dtype, torch.float32)
        adv = group_scores(rewards.to(adv_dtype), group_size, advantage_method, eps)  # (B,)
    token_adv = adv[:, None].expand(batch, length)
    stats: dict[str, Tensor] = {}
    if covariance_weighting:
        w = covariance_weights(logp, adv, mask)
        token_adv = w * token_adv  # A_{i,t} → w̃_{i,t} A_i
        valid = mask.bool()
        stats["cw_weight_min"] = w[valid].min() if bool(valid.any()) else torch.ones(())
        stats["cw_weight_max"] = w[valid].max() if bool(valid.any()) else torch.ones(())

    token_loss, clip_stats = clipped_surrogate(logp, old_logp, token_adv, mask, clip_eps, clip_eps_high)
    norm = length if max_completion_length is None else max_completion_length
    if aggregation == "seq_mean_token_mean":
        pg_loss = _seq_mean_token_mean(token_loss, mask)
    else:  # "seq_mean_token_sum_norm": 1/B Σ_i Σ_t ℓ_{i,t} / L
        pg_loss = masked_sum(token_loss, mask, dim=-1).mean() / norm
    loss = pg_loss
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp, mask)
        if kl_coef > 0:
            kl_agg = (
                _seq_mean_token_mean(kl, mask)
                if aggregation == "seq_mean_token_mean"
                else masked_sum(kl, mask, dim=-1).mean() / norm
            )
            loss = pg_loss + kl_coef * kl_agg
        stats["kl_mean"] = masked_mean(kl.detach(), mask)
    stats = {
        "loss": loss.detach(),
        "pg_loss": pg_loss.detach(),
        "advantage_mean": adv.mean(),
        "advantage_abs_mean": adv.abs().mean(),
        "reward_mean": rewards.detach().to(logp.dtype).mean(),
        **clip_stats,
        **stats,
    }
    return loss, _to_floats(stats)


# ----------------------------------------------------------------------------------------------------
# group-advantage baselines
# ----------------------------------------------------------------------------------------------------


@register_policy_loss("grpo", label="GRPO")
def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    ref_logp: Tensor | None = None,
    eps: float = 1e-6,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO (Shao et al. 2024; PACS Appendix A.2).

    A_i = (R_i − mean_G R)/(std_G R + eps) (unbiased std); loss = 1/B Σ_i 1/|o_i| Σ_t [ℓ^clip_{i,t} +
    kl_coef · k3_{i,t}]. logp, old_logp, mask, ref_logp: (B, T); rewards: (B,) any real. The k3 term
    needs ref_logp; kl_mean is reported whenever ref_logp is given.
    """
    return _group_clip_loss(
        logp, old_logp, mask, rewards, group_size, "grpo", clip_eps, clip_eps_high, kl_coef, ref_logp, eps
    )


@register_policy_loss("dr_grpo", label="Dr. GRPO")
def dr_grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    ref_logp: Tensor | None = None,
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Dr. GRPO (Liu et al. 2025): no std, no length normalisation.

    A_i = R_i − mean_G R; loss = 1/B Σ_i (Σ_t ℓ_{i,t}) / L with the constant L = max_completion_length
    (default T = mask.shape[1], the padded response length). Shapes as grpo_loss.
    """
    if max_completion_length is not None and (
        isinstance(max_completion_length, bool)
        or not isinstance(max_completion_length, int)
        or max_completion_length < 1
    ):
        raise ValueError(
            f"max_completion_length={max_completion_length!r} must be a positive int (the generation budget), or None for T."
        )
    return _group_clip_loss(
        logp,
        old_logp,
        mask,
        rewards,
        group_size,
        "dr_grpo",
        clip_eps,
        clip_eps_high,
        kl_coef,
        ref_logp,
        aggregation="seq_mean_token_sum_norm",
        max_completion_length=max_completion_length,
    )


@register_policy_loss("rloo", label="RLOO")
def rloo_loss(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    ref_logp: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024) with the token-level clipped surrogate.

    A_i = R_i − 1/(G−1) Σ_{j≠i} R_j; aggregation as GRPO (1/B Σ_i 1/|o_i| Σ_t), so RLOO and GRPO differ
    only in the advantage. Shapes as grpo_loss.
    """
    return _group_clip_loss(
        logp, old_logp, mask, rewards, group_size, "rloo", clip_eps, clip_eps_high, kl_coef, ref_logp
    )


@torch.no_grad()
def covariance_weights(logp: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """CW-GRPO Gaussian-kernel token weights w̃ (cw_grpo_paper §2.3), detached.

    logp, mask: (B, T); advantages: (B,) one per sequence → (B, T), 0 on padding.
      c_{i,t} = (logp_{i,t} − mean logp)(A_i − mean A)   means over the valid tokens of the batch
      σ = std of c over valid tokens (unbiased)
      w = exp(−c²/2σ²);  w̃ = w · N / Σ w  (N = number of valid tokens, so mean w̃ = 1)
    Computed as N·softmax(−c²/2σ²) over valid tokens, which cannot underflow to 0/0. If σ = 0 (or fewer
    than 2 valid tokens) every valid weight is 1.
    """
    valid = mask.bool()
    dtype = torch.promote_types(logp.dtype, torch.float32)  # bf16 is too coarse for c² / σ²
    lp = logp.detach().to(dtype)
    token_adv = advantages.detach().to(dtype)[:, None].expand_as(lp)
    c = (lp - masked_mean(lp, mask)) * (token_adv - masked_mean(token_adv, mask))
    sigma2 = masked_var(c, mask)
    n_valid = valid.sum()
    if not bool(sigma2 > 0) or not bool(torch.isfinite(sigma2)):
        return valid.to(dtype)
    log_w = torch.where(valid, -(c**2) / (2.0 * sigma2), torch.full_like(c, float("-inf")))
    w = torch.softmax(log_w.reshape(-1), dim=0).reshape(c.shape) * n_valid.to(c.dtype)
    return torch.where(valid, w, torch.zeros_like(w))


@register_policy_loss("cw_grpo", label="CW-GRPO")
def cw_grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    ref_logp: Tensor | None = None,
    eps: float = 1e-6,
) -> tuple[Tensor, dict[str, float]]:
    """CW-GRPO (Wang et al. 2026): GRPO with A_i → w̃_{i,t} A_i, w̃ from :func:`covariance_weights`
    evaluated on the current (detached) logp and the GRPO advantages. Aggregation as GRPO. Shapes as
    grpo_loss; metrics add cw_weight_min / cw_weight_max.
    """
    return _group_clip_loss(
        logp,
        old_logp,
        mask,
        rewards,
        group_size,
        "grpo",
        clip_eps,
        clip_eps_high,
        kl_coef,
        ref_logp,
        eps,
        covariance_weighting=True,
    )


# ----------------------------------------------------------------------------------------------------
# PPO with a learned critic (Appendix A.1)
# ----------------------------------------------------------------------------------------------------


@register_policy_loss("ppo", label="PPO", needs_critic=True)
def ppo_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    advantages: Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip policy loss (Appendix A.1): 1/B Σ_i 1/|o_i| Σ_t ℓ^clip_{i,t}.

    logp, old_logp, mask, advantages: (B, T) (token advantages, e.g. from compute_gae, whitened or not).
    """
    check_token_tensors(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    check_finite(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    token_loss, stats = clipped_surrogate(logp, old_logp, advantages.detach(), mask, clip_eps, clip_eps_high)
    loss = _seq_mean_token_mean(token_loss, mask)
    return loss, _to_floats(
        {"loss": loss.detach(), "advantage_mean": masked_mean(advantages.detach(), mask), **stats}
    )


def ppo_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip_eps: float = 0.2
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss: 0.5 · mean_t max((V − G)², (V_old + clip(V − V_old, −ε, ε) − G)²).

    values (with gradient), old_values, returns, mask: (B, T). Mean over all response tokens of the batch
    (token mean, as TRL and verl do for the critic).
    """
    check_token_tensors(mask, values=values, old_values=old_values, returns=returns)
    if clip_eps < 0:
        raise ValueError(f"clip_eps={clip_eps} must be ≥ 0 (value clip range around old_values).")
    check_finite(mask, values=values, old_values=old_values, returns=returns)
    old_values, returns = old_values.detach(), returns.detach()
    clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    err_raw = (values - returns) ** 2
    err_clip = (clipped - returns) ** 2
    loss = 0.5 * masked_mean(torch.maximum(err_raw, err_clip), mask)
    stats = {
        "value_loss": loss.detach(),
        "value_clip_frac": masked_mean((err_clip > err_raw).to(values.dtype), mask),
        "value_mean": masked_mean(values.detach(), mask),
        "return_mean": masked_mean(returns, mask),
    }
    return loss, _to_floats(stats)


@torch.no_grad()
def compute_gae(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 1.0
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over response tokens (Schulman et al. 2016).

    token_rewards, values, mask: (B, T) → (advantages, returns), both (B, T), 0 on padding, no gradient.
      δ_t = r_t + γ V_{t'} − V_t,  A_t = δ_t + γλ A_{t'}
    where t' is the next response token of the row; after the last response token V_{t'} = A_{t'} = 0
    (no bootstrap past the end, whatever padding holds). returns = A + V. Not whitened: call
    masked_whiten on the advantages if you want that.
    """
    check_token_tensors(mask, token_rewards=token_rewards, values=values)
    valid = mask.bool()
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    r = torch.where(valid, token_rewards.to(values.dtype), zero)
    v = torch.where(valid, values, zero)
    next_value = torch.zeros_like(v[:, 0])
    next_adv = torch.zeros_like(v[:, 0])
    adv = torch.zeros_like(v)
    for t in reversed(range(v.shape[1])):
        delta = r[:, t] + gamma * next_value - v[:, t]
        a_t = delta + gamma * lam * next_adv
        on = valid[:, t]
        adv[:, t] = torch.where(on, a_t, zero)
        # padding positions pass the next response token's values through unchanged
        next_value = torch.where(on, v[:, t], next_value)
        next_adv = torch.where(on, a_t, next_adv)
    returns = torch.where(valid, adv + v, zero)
    return adv, returns


@torch.no_grad()
def outcome_token_rewards(rewards: Tensor, mask: Tensor) -> Tensor:
    """Place each row's outcome reward on its last response token.

    rewards: (B,), mask: (B, T) → (B, T) zeros except at the last position where mask is nonzero. A row
    without response tokens gets no reward (all zeros) — such a row carries no tokens to credit.
    """
    batch, length = check_token_tensors(mask)
    check_rewards(rewards, batch, binary=False)
    valid = mask.bool()
    positions = torch.arange(length, device=mask.device).expand(batch, length)
    last = torch.where(valid, positions, torch.full_like(positions, -1)).max(dim=1).values  # (B,)
    dtype = rewards.dtype if rewards.is_floating_point() else torch.get_default_dtype()
    out = torch.zeros(batch, length, dtype=dtype, device=mask.device)
    has = last >= 0
    out[has.nonzero().squeeze(-1), last[has]] = rewards.to(dtype)[has]
    return out
