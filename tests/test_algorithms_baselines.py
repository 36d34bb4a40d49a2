"""Baselines (GRPO, Dr. GRPO, RLOO, CW-GRPO, PPO pieces), masked helpers and the loss registry.

Expected numbers are worked out here by hand (python floats, fractions, explicit recursions), never by
calling the code under test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from pacs_rl.algorithms import (
    POLICY_LOSSES,
    aggregate_token_loss,
    compute_gae,
    compute_policy_loss,
    covariance_weights,
    cw_grpo_loss,
    dr_grpo_loss,
    grpo_loss,
    masked_mean,
    masked_sum,
    masked_whiten,
    outcome_token_rewards,
    pacs_loss,
    policy_loss_options,
    ppo_policy_loss,
    ppo_value_loss,
    rloo_loss,
)


@pytest.fixture(autouse=True)
def _float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------------------------
# GRPO: clipping on both sides, KL term
# ---------------------------------------------------------------------------------------------------

# one group of G = 2, rewards [1, 0]: mean 1/2, unbiased std sqrt(1/2)
RATIOS = [[1.5, 1.1, 0.5], [0.5, 0.9, 1.5]]


def _clip_batch():
    old = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -1.0, -2.0, 0.0]])
    log_r = torch.tensor([[math.log(r) for r in row] + [0.0] for row in RATIOS])
    logp = (old + log_r).clone()
    logp[:, 3] = NAN  # padding column holds garbage
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]])
    return logp.requires_grad_(True), old, mask, torch.tensor([1.0, 0.0])


@pytest.mark.parametrize("clip_eps_high", [None, 0.3])
def test_grpo_clips_both_sides(clip_eps_high):
    logp, old, mask, rewards = _clip_batch()
    eps = 1e-6
    a = 0.5 / (math.sqrt(0.5) + eps)
    hi = 1.2 if clip_eps_high is None else 1.3
    # row 0, A = +a: ratio 1.5 clipped to hi (no gradient); 1.1 inside; 0.5 below but A > 0 → unclipped
    # row 1, A = −a: ratio 0.5 clipped to 0.8 (no gradient); 0.9 inside; 1.5 above but A < 0 → unclipped
    row0 = [-a * hi, -a * 1.1, -a * 0.5]
    row1 = [a * 0.8, a * 0.9, a * 1.5]
    expected = (sum(row0) / 3 + sum(row1) / 3) / 2
    loss, m = grpo_loss(logp, old, mask, rewards, 2, clip_eps=0.2, clip_eps_high=clip_eps_high, eps=eps)
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    loss.backward()
    # d(−A ρ)/d logp = −A ρ where unclipped; 0 where the clipped branch is active; /(B |o_i|)
    grad = [[0.0, -a * 1.1 / 6, -a * 0.5 / 6, 0.0], [0.0, a * 0.9 / 6, a * 1.5 / 6, 0.0]]
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in grad]
    assert m["clip_ratio_high"] == pytest.approx(1 / 6)
    assert m["clip_ratio_low"] == pytest.approx(1 / 6)
    assert m["clip_ratio_region"] == pytest.approx(4 / 6)
    assert m["ratio_mean"] == pytest.approx(sum(RATIOS[0] + RATIOS[1]) / 6)
    assert m["approx_kl"] == pytest.approx(-sum(math.log(r) for r in RATIOS[0] + RATIOS[1]) / 6)
    assert m["advantage_abs_mean"] == pytest.approx(a)
    assert "kl_mean" not in m


def test_grpo_k3_kl_term():
    logp, old, mask, rewards = _clip_batch()
    ref = old + torch.tensor([[0.3, -0.2, 0.1, 5.0], [0.0, 0.4, -0.5, INF]])
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    pg = ((-a * 1.2 - a * 1.1 - a * 0.5) / 3 + (a * 0.8 + a * 0.9 + a * 1.5) / 3) / 2
    lp, rf = logp.detach().tolist(), ref.tolist()
    k3 = [[math.exp(rf[i][t] - lp[i][t]) - (rf[i][t] - lp[i][t]) - 1 for t in range(3)] for i in range(2)]
    kl_agg = (sum(k3[0]) / 3 + sum(k3[1]) / 3) / 2
    loss, m = grpo_loss(logp, old, mask, rewards, 2, kl_coef=0.1, ref_logp=ref)
    assert loss.item() == pytest.approx(pg + 0.1 * kl_agg, abs=1e-12)
    assert m["pg_loss"] == pytest.approx(pg, abs=1e-12)
    assert m["kl_mean"] == pytest.approx(sum(k3[0] + k3[1]) / 6, abs=1e-12)
    loss.backward()
    assert torch.isfinite(logp.grad).all()
    # kl_coef = 0 with a reference: loss is the surrogate alone, the KL is still reported
    loss0, m0 = grpo_loss(logp, old, mask, rewards, 2, ref_logp=ref)
    assert loss0.item() == pytest.approx(pg, abs=1e-12)
    assert m0["kl_mean"] == pytest.approx(m["kl_mean"])


# ---------------------------------------------------------------------------------------------------
# advantages and aggregation: at ρ = 1 every surrogate's gradient is −A_{i,t}/(B · normaliser_i)
# ---------------------------------------------------------------------------------------------------

REWARDS8 = [1, 0, 0, 1, 1, 1, 1, 0]
LENGTHS = [1, 3, 2, 4, 4, 2, 1, 3]


def _on_policy_batch(t: int = 4):
    gen = torch.Generator().manual_seed(11)
    old = -torch.rand(8, t, generator=gen) * 2
    mask = (torch.arange(t)[None, :] < torch.tensor(LENGTHS)[:, None]).to(torch.float64)
    logp = torch.where(mask.bool(), old, torch.full_like(old, NAN)).requires_grad_(True)
    return logp, old, mask, torch.tensor(REWARDS8, dtype=torch.float64)


def _frac_rloo(rewards, g):
    out = []
    for s in range(0, len(rewards), g):
        grp = [Fraction(r) for r in rewards[s : s + g]]
        out += [grp[i] - (sum(grp) - grp[i]) / (g - 1) for i in range(g)]
    return [float(x) for x in out]


def _grad_rows(adv, norms, t=4):
    b = len(adv)
    return [[(-adv[i] / (b * norms[i]) if k < LENGTHS[i] else 0.0) for k in range(t)] for i in range(b)]


def test_rloo_advantage_and_per_sequence_token_mean():
    logp, old, mask, rewards = _on_policy_batch()
    adv = _frac_rloo(REWARDS8, 4)
    loss, m = rloo_loss(logp, old, mask, rewards, 4)
    assert loss.item() == pytest.approx(-sum(adv) / 8, abs=1e-12)  # token mean of −A_i is −A_i
    loss.backward()
    expected = _grad_rows(adv, LENGTHS)
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in expected]
    assert m["clip_ratio_region"] == 0.0


def test_grpo_advantage_normalises_by_group_std_and_length():
    logp, old, mask, rewards = _on_policy_batch()
    adv = []
    for s in (0, 4):
        grp = REWARDS8[s : s + 4]
        mean = sum(grp) / 4
        std = math.sqrt(sum((r - mean) ** 2 for r in grp) / 3)
        adv += [(r - mean) / (std + 1e-6) for r in grp]
    loss, _ = grpo_loss(logp, old, mask, rewards, 4)
    loss.backward()
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in _grad_rows(adv, LENGTHS)]


@pytest.mark.parametrize("max_len", [None, 10])
def test_dr_grpo_constant_normaliser(max_len):
    logp, old, mask, rewards = _on_policy_batch(t=4)
    adv = []
    for s in (0, 4):
        grp = REWARDS8[s : s + 4]
        adv += [r - sum(grp) / 4 for r in grp]
    norm = 4 if max_len is None else max_len
    loss, _ = dr_grpo_loss(logp, old, mask, rewards, 4, max_completion_length=max_len)
    # 1/B Σ_i Σ_t (−A_i)/L = −1/B Σ_i A_i |o_i| / L: long completions weigh more, no 1/|o_i|
    assert loss.item() == pytest.approx(
        -sum(a * n for a, n in zip(adv, LENGTHS, strict=True)) / (8 * norm), abs=1e-12
    )
    loss.backward()
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in _grad_rows(adv, [norm] * 8)]


# ---------------------------------------------------------------------------------------------------
# The PACS authors' baseline settings: seq-mean-token-sum-norm, dual clip; TRL's unscored rows and vLLM
# importance-sampling ratio
# ---------------------------------------------------------------------------------------------------


def _trl_advantages(rewards, scored, g):
    """TRL 1.16 GRPOTrainer: unscorable rewards NaN, nan-aware group mean and std, advantage NaN → 0."""
    r = torch.tensor([float(x) if ok else NAN for x, ok in zip(rewards, scored, strict=True)]).view(-1, g)
    mean = torch.nanmean(r, dim=1, keepdim=True)
    count = (~torch.isnan(r)).sum(dim=1, keepdim=True)
    var = torch.nanmean((r - mean) ** 2, dim=1, keepdim=True) * count / (count - 1)
    adv = (r - mean) / (var.sqrt() + 1e-6)
    return torch.nan_to_num(adv, nan=0.0).reshape(-1).tolist()


def test_aggregate_token_loss_modes_hand_computed():
    loss = torch.tensor([[1.0, 2.0, 3.0, NAN], [4.0, INF, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]])  # row 2: no response token
    assert aggregate_token_loss(loss, mask, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate_token_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(
        (6 / 3 + 4 / 1) / 3
    )
    # verl 0.4.0 agg_loss: torch.sum(seq_losses) / loss_mask.shape[-1], a sum over the rows, not a mean
    assert aggregate_token_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx((6 + 4) / 4)
    assert aggregate_token_loss(loss, mask, "seq-mean-token-sum-norm", norm=4096).item() == pytest.approx(
        10 / 4096
    )
    with pytest.raises(ValueError, match="loss_agg_mode='seq-mean'"):
        aggregate_token_loss(loss, mask, "seq-mean")
    with pytest.raises(ValueError, match="max_completion_length=0"):
        aggregate_token_loss(loss, mask, "seq-mean-token-sum-norm", norm=0)


def test_grpo_token_sum_norm_over_micro_batches_matches_the_authors_verl():
    """The authors' GRPO (verl 0.4.0): each micro-batch of m rows gives Σ_i Σ_t ℓ / L, divided by the number of
    micro-batches; so the mini-batch loss is m × the mean over its rows of Σ_t ℓ / L."""
    logp, old, mask, rewards = _on_policy_batch()
    adv = _trl_advantages(REWARDS8, [True] * 8, 4)  # plain GRPO advantages: every row scored
    length = 4096
    micro = [slice(0, 4), slice(4, 8)]  # two micro-batches of one group each (m = 4)
    total = 0.0
    for rows in micro:
        loss, _ = grpo_loss(
            logp[rows], old[rows], mask[rows], rewards[rows], 4,
            loss_agg_mode="seq-mean-token-sum-norm", max_completion_length=length,
        )  # fmt: skip
        (loss / len(micro)).backward()
        total += loss.item() / len(micro)
    per_seq = [-a * n / length for a, n in zip(adv, LENGTHS, strict=True)]  # Σ_t ℓ / L at ρ = 1
    assert total == pytest.approx(4 * sum(per_seq) / 8, abs=1e-12)
    # ∂/∂logp_{i,t} = −A_i / L / (number of micro-batches): no 1/|o_i|, no 1/B
    expected = [[(-adv[i] / length / 2 if k < LENGTHS[i] else 0.0) for k in range(4)] for i in range(8)]
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-15) for r in expected]


def test_ppo_losses_take_the_authors_aggregation():
    logp, old, mask, _ = _on_policy_batch()
    adv = torch.linspace(-1, 1, 32).reshape(8, 4)
    loss, _ = ppo_policy_loss(
        logp, old, mask, adv, loss_agg_mode="seq-mean-token-sum-norm", max_completion_length=16
    )
    hand = sum(-adv[i, k].item() for i in range(8) for k in range(LENGTHS[i])) / 16
    assert loss.item() == pytest.approx(hand, abs=1e-12)
    values = torch.tensor([[0.5, 0.1, 0.0, 0.0]] * 8, requires_grad=True)
    returns = torch.ones(8, 4)
    vloss, _ = ppo_value_loss(
        values,
        values.detach(),
        returns,
        mask,
        loss_agg_mode="seq-mean-token-sum-norm",
        max_completion_length=16,
    )
    err = [0.25, 0.81, 1.0, 1.0]  # (V − G)² per position; V = V_old, so the clip is inactive
    assert vloss.item() == pytest.approx(0.5 * sum(sum(err[: LENGTHS[i]]) for i in range(8)) / 16, abs=1e-12)
    vmean, _ = ppo_value_loss(values, values.detach(), returns, mask)  # default: token mean
    assert vmean.item() == pytest.approx(0.5 * sum(sum(err[:n]) for n in LENGTHS) / sum(LENGTHS), abs=1e-12)


def test_dual_clip_bounds_negative_advantage_tokens_far_above_one():
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[5.0, 2.0, 0.5]])).requires_grad_(True)
    mask = torch.ones(1, 3)
    adv = torch.full((1, 3), -2.0)
    # A < 0: ℓ = max(−Aρ, −A clip(ρ)) = 2ρ for ρ ≥ 0.8; the dual clip caps it at −A·c = 6
    loss, m = ppo_policy_loss(logp, old, mask, adv, clip_ratio_c=3.0)
    assert loss.item() == pytest.approx((6.0 + 4.0 + 2.0 * 0.8) / 3, abs=1e-12)
    assert m["clip_ratio_dual"] == pytest.approx(1 / 3)
    loss.backward()
    assert logp.grad.tolist() == [pytest.approx([0.0, 2.0 * 2.0 / 3, 0.0], abs=1e-12)]
    plain, _ = ppo_policy_loss(logp, old, mask, adv)
    assert plain.item() == pytest.approx((10.0 + 4.0 + 1.6) / 3, abs=1e-12)
    with pytest.raises(ValueError, match=r"clip_ratio_c=1\.0 must be > 1"):
        ppo_policy_loss(logp, old, mask, adv, clip_ratio_c=1.0)


def test_importance_sampling_ratio_weights_the_surrogate_as_trl():
    """TRL 1.16 _compute_loss: per_token_loss × importance_sampling_ratio, then + β·KL (not weighted)."""
    logp, old, mask, rewards = _clip_batch()
    ref = old + 0.1
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    w = [[0.5, 2.0, 1.0, NAN], [1.5, 0.0, 3.0, NAN]]  # padding may hold anything
    row0 = [-a * 1.2 * w[0][0], -a * 1.1 * w[0][1], -a * 0.5 * w[0][2]]
    row1 = [a * 0.8 * w[1][0], a * 0.9 * w[1][1], a * 1.5 * w[1][2]]
    pg = (sum(row0) / 3 + sum(row1) / 3) / 2
    lp, rf = logp.detach().tolist(), ref.tolist()
    k3 = [[math.exp(rf[i][t] - lp[i][t]) - (rf[i][t] - lp[i][t]) - 1 for t in range(3)] for i in range(2)]
    kl = (sum(k3[0]) / 3 + sum(k3[1]) / 3) / 2
    batch = dict(logp=logp, old_logp=old, mask=mask, rewards=rewards, group_size=2)
    loss, m = compute_policy_loss("grpo", **batch, ref_logp=ref, is_weights=torch.tensor(w), kl_coef=0.05)
    assert m["pg_loss"] == pytest.approx(pg, abs=1e-12)
    assert loss.item() == pytest.approx(pg + 0.05 * kl, abs=1e-12)
    # one ratio per sequence, (B, 1), as TRL's sequence_* modes give
    seq, _ = compute_policy_loss("grpo", **batch, is_weights=torch.tensor([[2.0], [0.5]]))
    plain = [-a * 1.2, -a * 1.1, -a * 0.5], [a * 0.8, a * 0.9, a * 1.5]
    assert seq.item() == pytest.approx((2.0 * sum(plain[0]) / 3 + 0.5 * sum(plain[1]) / 3) / 2, abs=1e-12)
    with pytest.raises(ValueError, match="is_weights has shape"):
        compute_policy_loss("grpo", **batch, is_weights=torch.ones(2))
    with pytest.raises(ValueError, match="no importance ratio"):
        compute_policy_loss("pacs", **batch, is_weights=torch.ones(2, 4))


def test_kl_ratio_weighted_multiplies_k3_by_the_ratio():
    logp, old, mask, rewards = _clip_batch()
    ref = old + torch.tensor([[0.3, -0.2, 0.1, 5.0], [0.0, 0.4, -0.5, INF]])
    lp, rf = logp.detach().tolist(), ref.tolist()
    kl_w = [
        [(math.exp(rf[i][t] - lp[i][t]) - (rf[i][t] - lp[i][t]) - 1) * RATIOS[i][t] for t in range(3)]
        for i in range(2)
    ]
    plain, m = grpo_loss(logp, old, mask, rewards, 2, kl_coef=0.1, ref_logp=ref)
    weighted, _ = grpo_loss(logp, old, mask, rewards, 2, kl_coef=0.1, ref_logp=ref, kl_ratio_weighted=True)
    expected = m["pg_loss"] + 0.1 * (sum(kl_w[0]) / 3 + sum(kl_w[1]) / 3) / 2
    assert weighted.item() == pytest.approx(expected, abs=1e-12)
    assert weighted.item() != pytest.approx(plain.item(), abs=1e-6)


def test_unscored_rows_leave_the_group_baseline_with_zero_advantage():
    logp, old, mask, rewards = _on_policy_batch()
    scored = torch.tensor(
        [True, True, False, True, True, False, False, False]
    )  # group 1: a single scored row
    loss, m = grpo_loss(logp, old, mask, rewards, 4, scored=scored)
    loss.backward()
    adv = _trl_advantages(REWARDS8, scored.tolist(), 4)
    assert adv[2] == 0.0 and adv[4:] == [0.0] * 4 and adv[0] != 0.0
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in _grad_rows(adv, LENGTHS)]
    assert m["unscored_frac"] == pytest.approx(4 / 8)
    assert m["reward_mean"] == pytest.approx((1 + 0 + 1 + 1) / 4)
    # RLOO: the leave-one-out mean over the other scored rows; Dr. GRPO: minus the scored rows' mean
    logp.grad = None
    loss, _ = rloo_loss(logp, old, mask, rewards, 4, scored=scored)
    loss.backward()
    rloo = [1 - (0 + 1) / 2, 0 - (1 + 1) / 2, 0.0, 1 - (1 + 0) / 2] + [0.0] * 4
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in _grad_rows(rloo, LENGTHS)]
    logp.grad = None
    loss, _ = dr_grpo_loss(logp, old, mask, rewards, 4, scored=scored)
    loss.backward()
    dr = [1 - 2 / 3, 0 - 2 / 3, 0.0, 1 - 2 / 3, 0.0, 0.0, 0.0, 0.0]
    assert logp.grad.tolist() == [pytest.approx(r, abs=1e-12) for r in _grad_rows(dr, [4] * 8)]
    # every row scored: the same loss as without the flag
    full, _ = grpo_loss(logp, old, mask, rewards, 4, scored=torch.ones(8, dtype=torch.bool))
    assert full.item() == grpo_loss(logp, old, mask, rewards, 4)[0].item()
    with pytest.raises(ValueError, match="needs a 0/1 label for every row"):
        compute_policy_loss(
            "pacs", logp=logp, old_logp=old, mask=mask, rewards=rewards, group_size=4, scored=scored
        )


# ---------------------------------------------------------------------------------------------------
# CW-GRPO
# ---------------------------------------------------------------------------------------------------


def _cw_batch():
    logp = torch.tensor(
        [
            [-0.2, -1.0, -9.0, NAN],  # one extreme token in a row with a nonzero advantage
            [-0.5, -0.7, INF, INF],
            [-1.1, -0.3, -0.6, -0.2],
            [-0.4, NAN, NAN, NAN],
        ]
    )
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])  # group 0 mixed, group 1 all correct (A = 0)
    return logp, mask, rewards


def _hand_cw(logp_rows, mask_rows, adv):
    toks = [(i, t) for i in range(len(mask_rows)) for t in range(len(mask_rows[0])) if mask_rows[i][t]]
    n = len(toks)
    lbar = sum(logp_rows[i][t] for i, t in toks) / n
    abar = sum(adv[i] for i, _ in toks) / n
    c = {(i, t): (logp_rows[i][t] - lbar) * (adv[i] - abar) for i, t in toks}
    cbar = sum(c.values()) / n
    var = sum((v - cbar) ** 2 for v in c.values()) / (n - 1)
    w = {k: math.exp(-(v**2) / (2 * var)) for k, v in c.items()}
    total = sum(w.values())
    return {k: v * n / total for k, v in w.items()}


def test_covariance_weights_hand_computed_mean_one_and_extreme_token_down_weighted():
    logp, mask, _ = _cw_batch()
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    adv = [a, -a, 0.0, 0.0]
    w = covariance_weights(logp, torch.tensor(adv), mask)
    hand = _hand_cw(logp.tolist(), mask.tolist(), adv)
    for (i, t), v in hand.items():
        assert w[i, t].item() == pytest.approx(v, abs=1e-12)
    assert torch.all(w[~mask.bool()] == 0)
    assert w[mask.bool()].mean().item() == pytest.approx(1.0, abs=1e-12)
    assert w[0, 2].item() == w[mask.bool()].min().item() < 0.5  # the −9.0 token
    assert not w.requires_grad


def test_cw_grpo_gradient_is_reweighted_grpo_and_guards_zero_sigma():
    logp, mask, rewards = _cw_batch()
    old = torch.where(mask.bool(), logp, 0.0)
    lp = logp.clone().requires_grad_(True)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    adv = [a, -a, 0.0, 0.0]
    hand = _hand_cw(logp.tolist(), mask.tolist(), adv)
    loss, m = cw_grpo_loss(lp, old, mask, rewards, 2)
    loss.backward()
    lengths = [3, 2, 4, 1]
    for (i, t), wv in hand.items():
        assert lp.grad[i, t].item() == pytest.approx(-wv * adv[i] / (4 * lengths[i]), abs=1e-12)
    assert m["cw_weight_min"] == pytest.approx(min(hand.values()))
    assert m["cw_weight_max"] == pytest.approx(max(hand.values()))
    # all advantages 0 ⇒ every c = 0 ⇒ σ = 0: weights fall back to 1, loss is 0 and finite
    same = torch.ones(4)
    loss0, m0 = cw_grpo_loss(logp, old, mask, same, 2)
    assert loss0.item() == 0.0
    assert m0["cw_weight_min"] == m0["cw_weight_max"] == 1.0
    w_const = covariance_weights(torch.full((2, 3), -1.0), torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    assert w_const.tolist() == [[1.0] * 3] * 2  # equal logp ⇒ c = 0 ⇒ σ = 0


# ---------------------------------------------------------------------------------------------------
# PPO pieces
# ---------------------------------------------------------------------------------------------------


def test_ppo_policy_loss_token_advantages():
    old = torch.tensor([[-1.0, -1.0, -1.0, 0.0]])
    ratios = [1.3, 0.7, 1.0]
    logp = (old + torch.tensor([[math.log(r) for r in ratios] + [0.0]])).requires_grad_(True)
    adv = torch.tensor([[1.0, -2.0, 0.5, 99.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # A=1, ρ=1.3 → −1.2 (clipped); A=−2, ρ=0.7 → max(1.4, 1.6) = 1.6 (clipped); A=.5, ρ=1 → −0.5
    loss, m = ppo_policy_loss(logp, old, mask, adv, clip_eps=0.2)
    assert loss.item() == pytest.approx((-1.2 + 1.6 - 0.5) / 3, abs=1e-12)
    loss.backward()
    assert logp.grad.tolist() == [pytest.approx([0.0, 0.0, -0.5 / 3, 0.0], abs=1e-12)]
    assert m["clip_ratio_high"] == pytest.approx(1 / 3)
    assert m["clip_ratio_low"] == pytest.approx(1 / 3)


def test_ppo_value_loss_clips_around_old_values():
    values = torch.tensor([[1.0, 2.0, 0.1, 7.0]], requires_grad=True)
    old = torch.tensor([[0.5, 2.3, 0.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0, 0.3, -5.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    eps = 0.2
    terms, clipped_count = [], 0
    for v, o, r in zip([1.0, 2.0, 0.1], [0.5, 2.3, 0.0], [2.0, 1.0, 0.3], strict=True):
        vc = o + max(-eps, min(eps, v - o))
        raw, clip = (v - r) ** 2, (vc - r) ** 2
        terms.append(max(raw, clip))
        clipped_count += clip > raw
    loss, m = ppo_value_loss(values, old, returns, mask, clip_eps=eps)
    assert loss.item() == pytest.approx(0.5 * sum(terms) / 3, abs=1e-12)
    assert m["value_clip_frac"] == pytest.approx(clipped_count / 3)
    loss.backward()
    # tokens 0 and 1: the clipped (saturated) branch wins, no gradient; token 2: 0.5 · 2 (v − R) / 3
    assert values.grad.tolist() == [pytest.approx([0.0, 0.0, (0.1 - 0.3) / 3, 0.0], abs=1e-12)]


def test_gae_with_padding_hand_worked():
    gamma, lam = 0.9, 0.8
    rewards = torch.tensor([[0.0, 0.0, 1.0, 9.0], [9.0, 0.0, 0.0, 1.0], [0.1, 0.0, -0.2, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7, 100.0], [100.0, 0.5, 0.6, 0.7], [1.0, 0.2, 0.3, 0.4]])
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1], [1, 1, 1, 1]])
    adv, ret = compute_gae(rewards, values, mask, gamma, lam)
    # row 0, right padding: no bootstrap from the padded value 100
    d2 = 1.0 + gamma * 0.0 - 0.7  # 0.3
    a2 = d2
    d1 = 0.0 + gamma * 0.7 - 0.6  # 0.03
    a1 = d1 + gamma * lam * a2  # 0.03 + 0.72 · 0.3 = 0.246
    d0 = 0.0 + gamma * 0.6 - 0.5  # 0.04
    a0 = d0 + gamma * lam * a1  # 0.04 + 0.72 · 0.246 = 0.21712
    assert adv[0].tolist() == pytest.approx([a0, a1, a2, 0.0], abs=1e-12)
    assert (a0, a1, a2) == pytest.approx((0.21712, 0.246, 0.3), abs=1e-12)
    assert ret[0].tolist() == pytest.approx([a0 + 0.5, a1 + 0.6, a2 + 0.7, 0.0], abs=1e-12)
    # row 1, left padding: the same numbers shifted by one
    assert adv[1].tolist() == pytest.approx([0.0, a0, a1, a2], abs=1e-12)
    # row 2, full length: scalar recursion
    r, v = [0.1, 0.0, -0.2, 1.0], [1.0, 0.2, 0.3, 0.4]
    expect, nxt_v, nxt_a = [0.0] * 4, 0.0, 0.0
    for t in (3, 2, 1, 0):
        nxt_a = r[t] + gamma * nxt_v - v[t] + gamma * lam * nxt_a
        expect[t], nxt_v = nxt_a, v[t]
    assert adv[2].tolist() == pytest.approx(expect, abs=1e-12)


def test_outcome_token_rewards_on_last_valid_token():
    mask = torch.tensor([[1, 1, 0], [0, 1, 1], [0, 0, 0], [1, 0, 1]])
    out = outcome_token_rewards(torch.tensor([1.0, 0.5, 1.0, -2.0]), mask)
    assert out.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0], [0.0, 0.0, -2.0]]


def test_gae_on_outcome_rewards_with_gamma_lambda_one_is_return_minus_value():
    mask = torch.tensor([[1, 1, 1, 0]])
    r = outcome_token_rewards(torch.tensor([1.0]), mask)
    v = torch.tensor([[0.2, 0.4, 0.9, 5.0]])
    adv, ret = compute_gae(r, v, mask, 1.0, 1.0)
    assert adv.tolist() == [pytest.approx([0.8, 0.6, 0.1, 0.0], abs=1e-12)]
    assert ret.tolist() == [pytest.approx([1.0, 1.0, 1.0, 0.0], abs=1e-12)]


# ---------------------------------------------------------------------------------------------------
# masked helpers
# ---------------------------------------------------------------------------------------------------


def test_masked_whiten_mean_and_sum():
    x = torch.tensor([[1.0, 2.0, NAN], [3.0, INF, -1e30]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    s = 1 / math.sqrt(1.0 + 1e-8)  # selected {1, 2, 3}: mean 2, unbiased variance 1
    assert masked_whiten(x, mask).tolist() == [pytest.approx([-s, 0.0, 0.0]), pytest.approx([s, 0.0, 0.0])]
    assert masked_whiten(x, mask, shift_mean=False).tolist()[0] == pytest.approx([2 - s, 2.0, 0.0])
    assert masked_mean(x, mask).item() == pytest.approx(2.0)
    assert masked_mean(x, mask, dim=-1).tolist() == [1.5, 3.0]
    assert masked_sum(x, mask, dim=-1).tolist() == [3.0, 3.0]
    assert masked_mean(x, torch.zeros(2, 3), dim=-1).tolist() == [0.0, 0.0]


# ---------------------------------------------------------------------------------------------------
# registry
# ---------------------------------------------------------------------------------------------------


def test_registry_dispatches_to_each_loss():
    logp, old, mask, rewards = _on_policy_batch()
    ref = old - 0.1
    assert set(POLICY_LOSSES) == {"pacs", "grpo", "dr_grpo", "rloo", "cw_grpo"}
    direct = {
        "grpo": grpo_loss(logp, old, mask, rewards, 4, clip_eps=0.1, ref_logp=ref, kl_coef=0.05),
        "dr_grpo": dr_grpo_loss(logp, old, mask, rewards, 4, clip_eps=0.1, ref_logp=ref, kl_coef=0.05),
        "rloo": rloo_loss(logp, old, mask, rewards, 4, clip_eps=0.1, ref_logp=ref, kl_coef=0.05),
        "cw_grpo": cw_grpo_loss(logp, old, mask, rewards, 4, clip_eps=0.1, ref_logp=ref, kl_coef=0.05),
    }
    for name, (loss, metrics) in direct.items():
        got, got_m = compute_policy_loss(
            name,
            logp=logp,
            old_logp=old,
            mask=mask,
            rewards=rewards,
            group_size=4,
            ref_logp=ref,
            clip_eps=0.1,
            kl_coef=0.05,
        )
        assert got.item() == pytest.approx(loss.item(), abs=1e-12)
        assert got_m == pytest.approx(metrics)


def test_registry_pacs_reference_defaults_to_old_logp():
    logp, old, mask, rewards = _on_policy_batch()
    ref = old - 0.3
    a, _ = compute_policy_loss(
        "pacs", logp=logp, old_logp=old, mask=mask, rewards=rewards, group_size=4, beta=0.5
    )
    b, _ = pacs_loss(logp, old, mask, rewards, 4, beta=0.5)
    c, _ = compute_policy_loss(
        "pacs",
        logp=logp,
        old_logp=old,
        mask=mask,
        rewards=rewards,
        group_size=4,
        ref_logp=ref,
        score="dr_grpo",
    )
    d, _ = pacs_loss(logp, ref, mask, rewards, 4, score="dr_grpo")
    assert a.item() == pytest.approx(b.item(), abs=1e-12)
    assert a.item() == pytest.approx(math.log(2), abs=1e-12)  # logp == old ⇒ ψ = 0 ⇒ ln 2 · mean(w) = ln 2
    assert c.item() == pytest.approx(d.item(), abs=1e-12)
    assert set(policy_loss_options("pacs")) == {"beta", "score", "weighted"}


def test_registry_rejects_unknown_names_and_options():
    logp, old, mask, rewards = _on_policy_batch()
    kw = dict(logp=logp, old_logp=old, mask=mask, rewards=rewards, group_size=4)
    with pytest.raises(
        ValueError,
        match=r"unknown policy loss 'ppo'; choose one of \['cw_grpo', 'dr_grpo', 'grpo', 'pacs', 'rloo'\]",
    ):
        compute_policy_loss("ppo", **kw)
    with pytest.raises(
        ValueError,
        match=r"unknown option\(s\) \['clip_eps'\] for policy loss 'pacs'; valid options: \['beta', 'score', 'weighted'\]",
    ):
        compute_policy_loss("pacs", clip_eps=0.2, **kw)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['beta'\] for policy loss 'grpo'"):
        compute_policy_loss("grpo", beta=1.0, **kw)


# ---------------------------------------------------------------------------------------------------
# ValueErrors of the baselines
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda lp, o, m, r: grpo_loss(lp, o, m, r, 4, kl_coef=0.1), "kl_coef=0.1 > 0 needs ref_logp"),
        (lambda lp, o, m, r: grpo_loss(lp, o, m, r, 4, kl_coef=-1.0, ref_logp=o), "kl_coef=-1.0 must be ≥ 0"),
        (lambda lp, o, m, r: grpo_loss(lp, o, m, r, 4, clip_eps=1.5), r"clip_eps=1.5 must be in \[0, 1\)"),
        (lambda lp, o, m, r: rloo_loss(lp, o, m, r, 4, clip_eps_high=-0.1), "clip_eps_high=-0.1 must be ≥ 0"),
        (
            lambda lp, o, m, r: dr_grpo_loss(lp, o, m, r, 4, max_completion_length=0),
            "max_completion_length=0",
        ),
        (lambda lp, o, m, r: grpo_loss(lp, o[:, :2], m, r, 4), "old_logp has shape"),
        (lambda lp, o, m, r: grpo_loss(lp, o, m, r, 4, ref_logp=o[:4]), "ref_logp has shape"),
        (lambda lp, o, m, r: rloo_loss(lp, o, m, r, 1), r"group_size=1 is too small: the rloo advantage"),
        (lambda lp, o, m, r: cw_grpo_loss(lp, o, m, r, 3), "B=8 rows is not a multiple of group_size=3"),
        (lambda lp, o, m, r: grpo_loss(lp, o, m, r[:4], 4), r"rewards must have shape \(8,\)"),
        (
            lambda lp, o, m, r: grpo_loss(lp, o.masked_fill(m.bool(), INF), m, r, 4),
            "old_logp holds 20 non-finite",
        ),
        (lambda lp, o, m, r: ppo_policy_loss(lp, o, m, o[:, :1]), "advantages has shape"),
        (
            lambda lp, o, m, r: ppo_policy_loss(lp, o, m, torch.full_like(o, NAN)),
            "advantages holds 20 non-finite",
        ),
        (lambda lp, o, m, r: ppo_value_loss(o, o, o, m, clip_eps=-1.0), "clip_eps=-1.0 must be ≥ 0"),
        (lambda lp, o, m, r: ppo_value_loss(o, o, o[:2], m), "returns has shape"),
        (lambda lp, o, m, r: compute_gae(o, o[:, :1], m), "values has shape"),
        (lambda lp, o, m, r: outcome_token_rewards(r[:3], m), r"rewards must have shape \(8,\)"),
    ],
)
def test_baselines_reject_bad_inputs(call, pattern):
    logp, old, mask, rewards = _on_policy_batch()
    with pytest.raises(ValueError, match=pattern):
        call(logp, old, mask, rewards)


def test_dr_grpo_accepts_group_size_one_and_real_valued_rewards():
    logp, old, mask, _ = _on_policy_batch()
    loss, _ = dr_grpo_loss(logp, old, mask, torch.linspace(-1, 2, 8), 1)
    assert loss.item() == 0.0  # a group of one has advantage 0
    loss, m = grpo_loss(logp, old, mask, torch.linspace(-1, 2, 8), 4)
    assert math.isfinite(loss.item()) and m["reward_mean"] == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "cw_grpo"])
def test_bf16_log_probs_give_finite_losses_close_to_fp64(name):
    logp, old, mask, rewards = _on_policy_batch()
    lp = (logp.detach() + 0.05 * torch.where(mask.bool(), torch.sin(torch.arange(4.0)), 0.0)).nan_to_num(0.0)
    want, _ = compute_policy_loss(name, logp=lp, old_logp=old, mask=mask, rewards=rewards, group_size=4)
    lp16 = lp.to(torch.bfloat16).requires_grad_(True)
    got, m = compute_policy_loss(
        name, logp=lp16, old_logp=old.to(torch.bfloat16), mask=mask, rewards=rewards, group_size=4
    )
    got.backward()
    assert torch.isfinite(lp16.grad.float()).all()
    assert got.item() == pytest.approx(want.item(), abs=0.03)
    assert all(math.isfinite(v) for v in m.values())
