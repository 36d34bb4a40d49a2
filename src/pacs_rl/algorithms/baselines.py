"""Baselines the PACS paper compares against, as pure functions over (B, T) tensors.

Every policy loss takes ``logp`` (B, T, with gradient), ``old_logp`` (B, T, the rollout policy),
``mask`` (B, T, 1 on response tokens), ``rewards`` (B,) and ``group_size`` (G rows per prompt,
contiguous), and returns ``(loss, metrics)`` with metrics as python floats.

    ratio ρ_{i,t} = exp(logp − old_logp)
    ℓ_{i,t} = max(−A ρ, −A clip(ρ, 1−ε_low, 1+ε_high))      PPO-clip surrogate (to minimise)
              (and, with clip_ratio_c = c, min(ℓ, −A c) where A < 0: verl's dual clip)
    GRPO     A_i = (R_i − mean R)/(std R + eps)              Appendix A.2, 1/G Σ_i 1/|o_i| Σ_t
    Dr. GRPO A_i = R_i − mean R                              1/G Σ_i Σ_t / L (constant L)
    RLOO     A_i = R_i − mean_{j≠i} R_j                      1/G Σ_i 1/|o_i| Σ_t (same as GRPO)
    CW-GRPO  A_{i,t} = w̃_{i,t} A_i (Gaussian kernel of token covariance, cw_grpo_paper §2.3)
    PPO      A_{i,t} from GAE over a learned critic          Appendix A.1

The token losses are reduced by :func:`aggregate_token_loss` (``loss_agg_mode``, verl's names); the PACS
authors' baselines used ``seq-mean-token-sum-norm`` (docs/ALGORITHMS.md, "Ours vs the authors' runs").
Two optional per-row inputs follow TRL's GRPOTrainer: ``scored`` (B,) leaves completions no reward function
could score out of the group baseline with advantage 0, and ``is_weights`` (B, T) or (B, 1) multiplies the
token losses by the vLLM importance-sampling ratio (the KL term is not weighted).
"""

from __future__ import annotations

import inspect

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
from .options import LOSS_AGG_MODES
from .pacs import group_scores
from .registry import register_policy_loss

__all__ = [
    "aggregate_token_loss",
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


def aggregate_token_loss(token_loss: Tensor, mask: Tensor, mode: str, norm: int | None = None) -> Tensor:
    """Reduce a (B, T) token loss to a scalar, by verl's names (``core_algos.agg_loss``):

      seq-mean-token-mean      1/B Σ_i (1/|o_i|) Σ_t ℓ_{i,t}    GRPO/PPO as PACS Appendix A writes them
      seq-mean-token-sum-norm  Σ_i Σ_t ℓ_{i,t} / L               L = ``norm`` (default T = mask.shape[1])
      token-mean               Σ_i Σ_t ℓ_{i,t} / Σ_i |o_i|       verl's default (and the critic's here)

    ``seq-mean-token-sum-norm`` is what the PACS authors' baselines ran (verl 0.4.0, ``agg_loss``): a *sum*
    over the B rows given, divided by the maximum response length L, not by each completion's length.
    verl divided each micro-batch's loss by the number of micro-batches, as our trainers do, so the
    mini-batch gradient is (rows per micro-batch) × the per-sequence mean: pass micro-batches of the
    authors' size (``ppo_micro_batch_size_per_gpu`` = 8) to get their scale. (verl ≥ 0.9 divides by the
    global batch size instead, a per-sequence mean.) Rows without response tokens add 0.
    """
    if mode not in LOSS_AGG_MODES:
        raise ValueError(f"loss_agg_mode={mode!r} is not known; choose one of {list(LOSS_AGG_MODES)}.")
    if mode == "token-mean":
        return masked_mean(token_loss, mask)
    if mode == "seq-mean-token-mean":
        return masked_mean(token_loss, mask, dim=-1).mean()
    length = mask.shape[-1] if norm is None else _check_length(norm)
    return masked_sum(token_loss, mask) / length


def _check_length(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"max_completion_length={value!r} must be a positive int (the generation budget), or None for T."
        )
    return value


def _check_clip(
    clip_eps: float, clip_eps_high: float | None, clip_ratio_c: float | None = None
) -> tuple[float, float]:
    if not 0.0 <= clip_eps < 1.0:
        raise ValueError(
            f"clip_eps={clip_eps} must be in [0, 1) (the ratio is clipped to [1−ε, 1+ε]); 0.2 is usual."
        )
    high = clip_eps if clip_eps_high is None else clip_eps_high
    if high < 0.0:
        raise ValueError(f"clip_eps_high={clip_eps_high} must be ≥ 0 (or None to reuse clip_eps).")
    if clip_ratio_c is not None and not clip_ratio_c > 1.0:
        raise ValueError(
            f"clip_ratio_c={clip_ratio_c} must be > 1 (the dual-clip bound on ρ where A < 0; verl uses 3.0), "
            "or None for no dual clip."
        )
    return clip_eps, high


def clipped_surrogate(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    clip_ratio_c: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Token-level PPO-clip loss ℓ_{i,t} = max(−A ρ, −A clip(ρ, 1−ε, 1+ε_high)).

    logp, old_logp, advantages, mask: (B, T) → ((B, T) per-token loss, 0 on padding; dict of 0-dim
    detached stats: clip_ratio_low (A<0 and ρ<1−ε: the clip stops a decrease), clip_ratio_high (A>0 and
    ρ>1+ε_high), clip_ratio_region (ρ outside the interval, any A), ratio_mean, approx_kl = mean(old − logp)).
    Fractions are over response tokens. Padding is set to log-ratio 0 before exp, so garbage there is inert.
    Computed in at least fp32 (bf16 inputs are upcast; gradients still reach them).
    clip_ratio_c = c > 1 adds verl's dual clip (Ye et al. 2020): where A < 0, ℓ = min(ℓ, −A c), which bounds
    the loss of a token whose ratio ran far above 1; stat clip_ratio_dual (fraction of tokens it bounds).
    """
    low_eps, high_eps = _check_clip(clip_eps, clip_eps_high, clip_ratio_c)
    valid = mask.bool()
    dtype = torch.promote_types(logp.dtype, torch.float32)  # ratios near 1 need more than bf16
    log_ratio = torch.where(
        valid, logp.to(dtype) - old_logp.to(dtype), torch.zeros((), dtype=dtype, device=logp.device)
    )
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - low_eps, 1.0 + high_eps)
    token_loss = torch.maximum(-advantages * ratio, -advantages * clipped)
    if clip_ratio_c is not None:
        dual = (advantages < 0) & (token_loss > -advantages * clip_ratio_c)
        token_loss = torch.where(
            advantages < 0, torch.minimum(token_loss, -advantages * clip_ratio_c), token_loss
        )
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
        if clip_ratio_c is not None:
            stats["clip_ratio_dual"] = masked_mean(dual.to(dtype), mask)
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


def _to_floats(stats: dict[str, Tensor]) -> dict[str, float]:
    names = list(stats)
    dtype = torch.float32
    for k in names:  # report bf16/fp16 in fp32, keep fp64 as is
        dtype = torch.promote_types(dtype, stats[k].dtype) if stats[k].is_floating_point() else dtype
    values = torch.stack([stats[k].detach().reshape(()).to(dtype) for k in names]).tolist()  # one sync
    return dict(zip(names, values, strict=True))


def _is_weighted(token_loss: Tensor, is_weights: Tensor | None, mask: Tensor) -> Tensor:
    """token_loss × the importance-sampling ratio (B, T) or (B, 1), detached, as TRL's GRPOTrainer applies it."""
    if is_weights is None:
        return token_loss
    batch, length = mask.shape
    if not isinstance(is_weights, Tensor) or tuple(is_weights.shape) not in ((batch, length), (batch, 1)):
        shape = tuple(is_weights.shape) if isinstance(is_weights, Tensor) else type(is_weights).__name__
        raise ValueError(
            f"is_weights has shape {shape}; it must be ({batch}, {length}) (one ratio per token) or ({batch}, 1) "
            "(one per sequence), TRL's importance_sampling_ratio."
        )
    w = is_weights.detach()
    check_finite(mask, is_weights=w.expand(batch, length))
    return token_loss * w.to(token_loss.dtype)


def _check_scored(scored: Tensor | None, batch: int) -> Tensor | None:
    if scored is None:
        return None
    if not isinstance(scored, Tensor) or scored.shape != (batch,):
        shape = tuple(scored.shape) if isinstance(scored, Tensor) else type(scored).__name__
        raise ValueError(f"scored must be a ({batch},) bool tensor, one flag per completion; got {shape}.")
    return scored.bool()


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
    loss_agg_mode: str = "seq-mean-token-mean",
    max_completion_length: int | None = None,
    covariance_weighting: bool = False,
    clip_ratio_c: float | None = None,
    kl_ratio_weighted: bool = False,
    scored: Tensor | None = None,
    is_weights: Tensor | None = None,
    dr_grpo_norm: bool = False,
) -> tuple[Tensor, dict[str, float]]:
    """Shared body of the group-advantage baselines (GRPO, Dr. GRPO, RLOO, CW-GRPO)."""
    batch, length, norm, scored = _check_group_inputs(
        logp, old_logp, mask, rewards, group_size, advantage_method, kl_coef, ref_logp, loss_agg_mode,
        max_completion_length, scored,
    )  # fmt: skip
    with torch.no_grad():  # advantages in at least fp32, also for bf16 log-probs
        adv_dtype = torch.promote_types(logp.dtype, torch.float32)
        adv = group_scores(rewards.to(adv_dtype), group_size, advantage_method, eps, valid=scored)  # (B,)
    token_adv = adv[:, None].expand(batch, length)
    stats: dict[str, Tensor] = {}
    if covariance_weighting:
        token_adv, stats = _covariance_weighted(logp, adv, token_adv, mask)

    token_loss, clip_stats = clipped_surrogate(
        logp, old_logp, token_adv, mask, clip_eps, clip_eps_high, clip_ratio_c
    )
    token_loss = _is_weighted(token_loss, is_weights, mask)

    def aggregate(x: Tensor) -> Tensor:
        if dr_grpo_norm:  # Dr. GRPO: 1/B Σ_i Σ_t ℓ / L
            return masked_sum(x, mask, dim=-1).mean() / (length if norm is None else norm)
        return aggregate_token_loss(x, mask, loss_agg_mode, norm)

    pg_loss = aggregate(token_loss)
    loss = pg_loss
    if ref_logp is not None:
        kl = _kl_penalty(logp, old_logp, ref_logp, mask, ratio_weighted=kl_coef > 0 and kl_ratio_weighted)
        if kl_coef > 0:
            loss = pg_loss + kl_coef * aggregate(kl)
        stats["kl_mean"] = masked_mean(kl.detach(), mask)
    return loss, _group_metrics(loss, pg_loss, adv, rewards, scored, clip_stats, stats)


def _check_group_inputs(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    rewards: Tensor,
    group_size: int,
    advantage_method: str,
    kl_coef: float,
    ref_logp: Tensor | None,
    loss_agg_mode: str,
    max_completion_length: int | None,
    scored: Tensor | None,
) -> tuple[int, int, int | None, Tensor | None]:
    """Validate a group baseline's inputs before any work (shapes, rewards, groups, options, finite values, in
    that order); returns (B, T, the length norm or None, ``scored`` as bool or None)."""
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
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(
            f"loss_agg_mode={loss_agg_mode!r} is not known; choose one of {list(LOSS_AGG_MODES)}."
        )
    norm = None if max_completion_length is None else _check_length(max_completion_length)
    scored = _check_scored(scored, batch)
    check_finite(mask, logp=logp, old_logp=old_logp, ref_logp=ref_logp)
    return batch, length, norm, scored


def _covariance_weighted(
    logp: Tensor, adv: Tensor, token_adv: Tensor, mask: Tensor
) -> tuple[Tensor, dict[str, Tensor]]:
    """CW-GRPO's token advantages A_{i,t} → w̃_{i,t} A_i, and the range of w̃ over response tokens (1 without
    any) as the stats cw_weight_min / cw_weight_max."""
    w = covariance_weights(logp, adv, mask)
    valid = mask.bool()
    stats = {
        "cw_weight_min": w[valid].min() if bool(valid.any()) else torch.ones(()),
        "cw_weight_max": w[valid].max() if bool(valid.any()) else torch.ones(()),
    }
    return w * token_adv, stats


def _kl_penalty(
    logp: Tensor, old_logp: Tensor, ref_logp: Tensor, mask: Tensor, ratio_weighted: bool
) -> Tensor:
    """The per-token k3 KL to the reference; with ``ratio_weighted``, × ρ with gradient: the unbiased
    reverse-KL gradient off-policy (TRL's use_bias_correction_kl)."""
    kl = k3_kl(logp, ref_logp, mask)
    if ratio_weighted:
        dtype = kl.dtype
        kl = kl * torch.exp(torch.where(mask.bool(), logp.to(dtype) - old_logp.to(dtype), 0.0))
    return kl


def _group_metrics(
    loss: Tensor,
    pg_loss: Tensor,
    adv: Tensor,
    rewards: Tensor,
    scored: Tensor | None,
    clip_stats: dict[str, Tensor],
    extra: dict[str, Tensor],
) -> dict[str, float]:
    """A group baseline's metrics as floats: losses, advantages, the mean reward over the scored rows, the clip
    stats, then ``extra`` (CW weights, KL) and the unscored fraction when ``scored`` is given."""
    batch = rewards.shape[0]
    rows = scored if scored is not None else torch.ones(batch, dtype=torch.bool, device=rewards.device)
    stats = {
        "loss": loss.detach(),
        "pg_loss": pg_loss.detach(),
        "advantage_mean": adv.mean(),
        "advantage_abs_mean": adv.abs().mean(),
        "reward_mean": masked_mean(rewards.detach().to(adv.dtype), rows),  # over scored rows
        **clip_stats,
        **extra,
    }
    if scored is not None:
        stats["unscored_frac"] = (~scored).to(adv.dtype).mean()
    return _to_floats(stats)


# ----------------------------------------------------------------------------------------------------
# group-advantage baselines
# ----------------------------------------------------------------------------------------------------

# Options every group baseline takes beyond clip_eps / clip_eps_high / kl_coef (one signature, below):
#   loss_agg_mode, max_completion_length   how token losses are reduced (aggregate_token_loss)
#   clip_ratio_c                            verl's dual clip
#   kl_ratio_weighted                       the KL term × ρ (TRL's use_bias_correction_kl)
# and per-row inputs scored (B,) and is_weights (B, T) or (B, 1).


def _group_loss_signature(
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
    loss_agg_mode: str = "seq-mean-token-mean",
    max_completion_length: int | None = None,
    clip_ratio_c: float | None = None,
    kl_ratio_weighted: bool = False,
    scored: Tensor | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """The signature the group baselines share (each made by :func:`_group_baseline`, less the options it has no
    use for); never called."""


def _group_baseline(
    name: str, label: str, advantage_method: str, doc: str, without: tuple[str, ...] = (), **variant
):
    """Group baseline ``name``: `_group_clip_loss` with the shared signature (less the options ``without``), its
    advantage from ``advantage_method`` and the ``variant`` switches (covariance_weighting, dr_grpo_norm),
    registered as ``name`` with table label ``label``."""
    signature = inspect.signature(_group_loss_signature)
    signature = signature.replace(
        parameters=[p for p in signature.parameters.values() if p.name not in without]
    )

    def loss(*args, **kwargs) -> tuple[Tensor, dict[str, float]]:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return _group_clip_loss(advantage_method=advantage_method, **bound.arguments, **variant)

    loss.__signature__ = signature
    loss.__name__ = loss.__qualname__ = f"{name}_loss"
    loss.__doc__ = doc
    return register_policy_loss(name, label=label)(loss)


grpo_loss = _group_baseline(
    "grpo",
    "GRPO",
    "grpo",
    """GRPO (Shao et al. 2024; PACS Appendix A.2).

    A_i = (R_i − mean_G R)/(std_G R + eps) (unbiased std); loss = agg[ℓ^clip_{i,t} + kl_coef · k3_{i,t}]
    with agg = ``loss_agg_mode`` (default seq-mean-token-mean, 1/B Σ_i 1/|o_i| Σ_t; the PACS authors' GRPO:
    seq-mean-token-sum-norm with L = ``max_completion_length``). logp, old_logp, mask, ref_logp: (B, T);
    rewards: (B,) any real. The k3 term needs ref_logp; kl_mean is reported whenever ref_logp is given.
    scored (B,): rows with False are left out of the group's mean and std and get advantage 0 (TRL's
    unscorable completions). is_weights: the vLLM importance-sampling ratio multiplying the surrogate.
    """,
)
dr_grpo_loss = _group_baseline(
    "dr_grpo",
    "Dr. GRPO",
    "dr_grpo",
    """Dr. GRPO (Liu et al. 2025): no std, no length normalisation.

    A_i = R_i − mean_G R; loss = 1/B Σ_i (Σ_t ℓ_{i,t}) / L with the constant L = max_completion_length
    (default T = mask.shape[1], the padded response length), as TRL's dr_grpo. The aggregation is the
    method itself, so it has no loss_agg_mode. Other arguments as grpo_loss.
    """,
    without=("eps", "loss_agg_mode"),
    dr_grpo_norm=True,
)
rloo_loss = _group_baseline(
    "rloo",
    "RLOO",
    "rloo",
    """RLOO (Kool et al. 2019; Ahmadian et al. 2024) with the token-level clipped surrogate.

    A_i = R_i − 1/(G−1) Σ_{j≠i} R_j (over the scored rows when ``scored`` is given); aggregation as GRPO,
    so RLOO and GRPO differ only in the advantage. Arguments as grpo_loss.
    """,
    without=("eps",),
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


cw_grpo_loss = _group_baseline(
    "cw_grpo",
    "CW-GRPO",
    "grpo",
    """CW-GRPO (Wang et al. 2026): GRPO with A_i → w̃_{i,t} A_i, w̃ from :func:`covariance_weights`
    evaluated on the current (detached) logp and the GRPO advantages. Aggregation as GRPO. Arguments as
    grpo_loss; metrics add cw_weight_min / cw_weight_max.
    """,
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
    loss_agg_mode: str = "seq-mean-token-mean",
    max_completion_length: int | None = None,
    clip_ratio_c: float | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip policy loss (Appendix A.1): agg ℓ^clip_{i,t}, agg = ``loss_agg_mode``
    (default seq-mean-token-mean, the 1/B Σ_i 1/|o_i| Σ_t of A.1; see :func:`aggregate_token_loss`).

    logp, old_logp, mask, advantages: (B, T) (token advantages, e.g. from compute_gae, whitened or not).
    clip_ratio_c: verl's dual clip; is_weights (B, T) or (B, 1): the vLLM importance-sampling ratio.
    """
    check_token_tensors(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    check_finite(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    norm = None if max_completion_length is None else _check_length(max_completion_length)
    token_loss, stats = clipped_surrogate(
        logp, old_logp, advantages.detach(), mask, clip_eps, clip_eps_high, clip_ratio_c
    )
    loss = aggregate_token_loss(_is_weighted(token_loss, is_weights, mask), mask, loss_agg_mode, norm)
    return loss, _to_floats(
        {"loss": loss.detach(), "advantage_mean": masked_mean(advantages.detach(), mask), **stats}
    )


def ppo_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    loss_agg_mode: str = "token-mean",
    max_completion_length: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss: 0.5 · agg max((V − G)², (V_old + clip(V − V_old, −ε, ε) − G)²).

    values (with gradient), old_values, returns, mask: (B, T). agg = ``loss_agg_mode``: token-mean by
    default (TRL's and verl's default for the critic); in verl the critic follows the actor's mode, so the
    PACS authors' PPO critic used seq-mean-token-sum-norm (see :func:`aggregate_token_loss`).
    """
    check_token_tensors(mask, values=values, old_values=old_values, returns=returns)
    if clip_eps < 0:
        raise ValueError(f"clip_eps={clip_eps} must be ≥ 0 (value clip range around old_values).")
    norm = None if max_completion_length is None else _check_length(max_completion_length)
    check_finite(mask, values=values, old_values=old_values, returns=returns)
    old_values, returns = old_values.detach(), returns.detach()
    clipped = old_values + torch.clamp(values - old_values, -clip_eps, clip_eps)
    err_raw = (values - returns) ** 2
    err_clip = (clipped - returns) ** 2
    loss = 0.5 * aggregate_token_loss(torch.maximum(err_raw, err_clip), mask, loss_agg_mode, norm)
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
