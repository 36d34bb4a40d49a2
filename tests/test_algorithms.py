"""PACS core: reward proxy (eq. 8), group scores (eq. 7/11/12), class weights (§3.4.2), loss (eq. 9).

Every expected number is computed here from first principles (python floats / fractions, explicit
loops), never by calling the code under test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from pacs_rl.algorithms import (
    class_balance_weights,
    finite_groups,
    group_auc,
    group_scores,
    pacs_loss,
    reward_proxy,
)


@pytest.fixture(autouse=True)
def _float64():
    """Hand arithmetic is compared at ~1e-10: run these tests in float64, then restore the default."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


# ---------------------------------------------------------------------------------------------------
# reference arithmetic, written out independently of the package
# ---------------------------------------------------------------------------------------------------


def ref_rloo(values: list[float], g: int) -> list[float]:
    out = []
    for start in range(0, len(values), g):
        grp = values[start : start + g]
        for i, v in enumerate(grp):
            others = [grp[j] for j in range(g) if j != i]
            out.append(v - sum(others) / (g - 1))
    return out


def ref_grpo(values: list[float], g: int, eps: float = 1e-6) -> list[float]:
    out = []
    for start in range(0, len(values), g):
        grp = values[start : start + g]
        mean = sum(grp) / g
        std = math.sqrt(sum((v - mean) ** 2 for v in grp) / (g - 1))
        out += [(v - mean) / (std + eps) for v in grp]
    return out


def ref_dr_grpo(values: list[float], g: int) -> list[float]:
    out = []
    for start in range(0, len(values), g):
        grp = values[start : start + g]
        mean = sum(grp) / g
        out += [v - mean for v in grp]
    return out


def ref_weights(rewards: list[int], g: int) -> list[Fraction]:
    out = []
    for start in range(0, len(rewards), g):
        grp = rewards[start : start + g]
        pos = sum(grp)
        neg = g - pos
        for r in grp:
            if pos == 0 or neg == 0:
                out.append(Fraction(1))
            else:
                out.append(Fraction(g, 2 * (pos if r == 1 else neg)))
    return out


def bce_with_logits(psi: float, r: int) -> float:
    # −[r log σ(ψ) + (1−r) log(1−σ(ψ))] = softplus(ψ) − rψ, with softplus(ψ) = max(ψ,0) + log1p(e^{−|ψ|})
    return max(psi, 0.0) + math.log1p(math.exp(-abs(psi))) - r * psi


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def make_batch(seed: int = 0, groups: int = 2, g: int = 4, t: int = 5):
    gen = torch.Generator().manual_seed(seed)
    b = groups * g
    logp = -torch.rand(b, t, generator=gen) * 3
    ref = -torch.rand(b, t, generator=gen) * 3
    lengths = torch.randint(1, t + 1, (b,), generator=gen)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).to(torch.float64)
    rewards = torch.randint(0, 2, (b,), generator=gen).to(torch.float64)
    return logp, ref, mask, rewards


# ---------------------------------------------------------------------------------------------------
# eq. 8: reward proxy
# ---------------------------------------------------------------------------------------------------


def test_reward_proxy_is_beta_times_masked_sum():
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.1, -0.2, -0.3]])
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-0.4, -0.2, -0.1]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    expected = [0.7 * ((-1.0 + 1.5) + (-2.0 + 1.0)), 0.7 * ((-0.1 + 0.4) + 0.0 + (-0.3 + 0.1))]
    out = reward_proxy(logp, ref, mask, beta=0.7)
    assert out.shape == (2,)
    assert out.tolist() == pytest.approx(expected, abs=1e-12)


def test_reward_proxy_ignores_garbage_padding_and_gives_no_padding_gradient():
    logp = torch.tensor([[-1.0, float("nan"), float("inf")]], requires_grad=True)
    ref = torch.tensor([[-3.0, float("-inf"), 1e30]])
    mask = torch.tensor([[True, False, False]])
    out = reward_proxy(logp, ref, mask)
    assert out.item() == pytest.approx(2.0)
    out.sum().backward()
    assert logp.grad.tolist() == [[1.0, 0.0, 0.0]]


def test_reward_proxy_upcasts_bf16_and_still_reaches_the_bf16_leaf():
    t = 2048
    logp = torch.full((1, t), -2.0, dtype=torch.bfloat16).requires_grad_(True)
    ref = torch.full((1, t), -2.015625, dtype=torch.bfloat16)  # one bf16 step (2⁻⁶) below −2
    out = reward_proxy(logp, ref, torch.ones(1, t))
    assert out.dtype == torch.float32
    assert out.item() == pytest.approx(t * 0.015625, rel=1e-6)  # 32.0, exact in fp32
    out.sum().backward()
    assert logp.grad.dtype == torch.bfloat16 and bool((logp.grad == 1).all())


# ---------------------------------------------------------------------------------------------------
# eq. 7 / 11 / 12: group scores
# ---------------------------------------------------------------------------------------------------

VALUES = [3.0, -1.0, 2.0, 0.0, 0.5, 0.25, -4.0, 1.0]  # two groups of four


def test_rloo_scores_hand_computed_with_fractions():
    fr = [Fraction(v).limit_denominator() for v in VALUES]
    expected = []
    for start in (0, 4):
        grp = fr[start : start + 4]
        for i in range(4):
            expected.append(grp[i] - (sum(grp) - grp[i]) / 3)
    out = group_scores(torch.tensor(VALUES), 4, "rloo")
    assert out.tolist() == pytest.approx([float(x) for x in expected], abs=1e-12)
    # first group written out: S = 4, ψ = v − (4 − v)/3
    assert out[:4].tolist() == pytest.approx([8 / 3, -8 / 3, 4 / 3, -4 / 3], abs=1e-12)


def test_grpo_scores_use_unbiased_std_and_eps():
    out = group_scores(torch.tensor(VALUES), 4, "grpo", eps=1e-6)
    assert out.tolist() == pytest.approx(ref_grpo(VALUES, 4, 1e-6), abs=1e-10)
    # first group: mean 1, unbiased variance (4 + 4 + 1 + 1)/3
    std = math.sqrt(10 / 3)
    assert out[0].item() == pytest.approx(2 / (std + 1e-6), abs=1e-12)


def test_dr_grpo_scores_subtract_the_group_mean():
    out = group_scores(torch.tensor(VALUES), 4, "dr_grpo")
    assert out.tolist() == pytest.approx(ref_dr_grpo(VALUES, 4), abs=1e-12)


def test_rloo_scores_sum_to_zero_within_each_group():
    gen = torch.Generator().manual_seed(3)
    v = torch.randn(6 * 8, generator=gen) * 100
    out = group_scores(v, 8, "rloo").view(6, 8)
    assert out.sum(dim=1).abs().max().item() < 1e-9


@pytest.mark.parametrize("method", ["rloo", "grpo", "dr_grpo"])
def test_group_scores_pass_gradcheck(method):
    v = torch.tensor(VALUES, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: group_scores(x, 4, method), (v,))


def test_grpo_score_of_a_constant_group_is_zero_with_finite_gradient():
    # all values equal: std = 0, the score is 0, and d/dv_j of (v_i − mean)/(std + eps) is (δ_ij − 1/G)/eps
    v = torch.zeros(4, requires_grad=True)
    out = group_scores(v, 4, "grpo", eps=0.5)
    assert out.tolist() == [0.0, 0.0, 0.0, 0.0]
    coeff = torch.tensor([1.0, 2.0, 3.0, 4.0])
    (out * coeff).sum().backward()
    expected = [(c - sum(coeff.tolist()) / 4) / 0.5 for c in coeff.tolist()]
    assert v.grad.tolist() == pytest.approx(expected, abs=1e-12)


# ---------------------------------------------------------------------------------------------------
# §3.4.2: class-balance weights
# ---------------------------------------------------------------------------------------------------


def test_class_weights_g8_two_correct():
    rewards = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0])
    w = class_balance_weights(rewards, 8)
    assert w.tolist() == pytest.approx([2.0, 8 / 12, 8 / 12, 2.0, 8 / 12, 8 / 12, 8 / 12, 8 / 12])
    assert w.sum().item() == pytest.approx(8.0)  # each class carries total weight G/2
    assert not w.requires_grad


def test_class_weights_single_label_groups_keep_one():
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0])
    w = class_balance_weights(rewards, 4)
    assert w.tolist() == pytest.approx([float(x) for x in ref_weights(rewards.int().tolist(), 4)])
    assert w[:8].tolist() == [1.0] * 8


# ---------------------------------------------------------------------------------------------------
# eq. 9: the loss, hand-computed
# ---------------------------------------------------------------------------------------------------

# G = 4, one group, T = 3 with ragged lengths
LOGP = [[-0.5, -1.0, -0.2], [-2.0, -0.1, -7.0], [-0.3, -0.3, -0.3], [-1.2, -0.4, -0.9]]
REF = [[-0.7, -0.6, -0.1], [-1.0, -0.5, -1.0], [-0.2, -0.1, -0.6], [-0.2, -0.9, -0.4]]
MASK = [[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]]
REWARDS = [1, 0, 0, 0]


def hand_r_hat(beta: float) -> list[float]:
    return [
        beta * sum((lp - rf) * m for lp, rf, m in zip(a, b, c, strict=True))
        for a, b, c in zip(LOGP, REF, MASK, strict=True)
    ]


@pytest.mark.parametrize("score", ["rloo", "grpo", "dr_grpo"])
@pytest.mark.parametrize("weighted", [True, False])
def test_pacs_loss_hand_computed(score, weighted):
    beta = 2.0
    r_hat = hand_r_hat(beta)
    psi = {"rloo": ref_rloo, "grpo": ref_grpo, "dr_grpo": ref_dr_grpo}[score](r_hat, 4)
    w = [float(x) for x in ref_weights(REWARDS, 4)] if weighted else [1.0] * 4
    expected = sum(wi * bce_with_logits(p, r) for wi, p, r in zip(w, psi, REWARDS, strict=True)) / 4

    loss, metrics = pacs_loss(
        torch.tensor(LOGP),
        torch.tensor(REF),
        torch.tensor(MASK),
        torch.tensor(REWARDS),
        4,
        beta,
        score,
        weighted,
    )
    assert loss.item() == pytest.approx(expected, abs=1e-10)
    assert metrics["loss"] == pytest.approx(expected, abs=1e-10)
    probs = [sigmoid(p) for p in psi]
    assert metrics["psi_mean"] == pytest.approx(sum(psi) / 4, abs=1e-10)
    assert metrics["prob_mean"] == pytest.approx(sum(probs) / 4, abs=1e-10)
    assert metrics["brier"] == pytest.approx(
        sum((p - r) ** 2 for p, r in zip(probs, REWARDS, strict=True)) / 4
    )
    acc = sum((p > 0.5) == (r == 1) for p, r in zip(probs, REWARDS, strict=True)) / 4
    assert metrics["critic_accuracy"] == pytest.approx(acc)
    assert metrics["weight_mean"] == pytest.approx(sum(w) / 4)
    assert metrics["reward_proxy_mean"] == pytest.approx(sum(r_hat) / 4)
    assert metrics["reward_mean"] == pytest.approx(0.25)
    assert all(isinstance(v, float) for v in metrics.values())


def test_balanced_weights_sum_to_the_batch_size():
    # mean over the N sequences (eq. 9) and the Σw-normalised mean coincide for these weights, because a
    # mixed group's weights sum to G/2 + G/2 and a single-label group's to G: Σw = B always.
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1])
    for g in (2, 3, 6):
        assert class_balance_weights(rewards, g).sum().item() == pytest.approx(len(rewards))


# ---------------------------------------------------------------------------------------------------
# eq. 5: autograd against the closed form
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("score", ["rloo", "dr_grpo"])
@pytest.mark.parametrize("weighted", [True, False])
def test_gradient_matches_closed_form_through_the_group_score(score, weighted):
    """∂L/∂ψ_i = w_i (σ(ψ_i) − R_i)/B (eq. 5); ∂ψ_i/∂r̂_j = 1[i=j] − c (c = 1/(G−1) for RLOO, and
    ψ_i = r̂_i − mean gives 1[i=j] − 1/G for Dr. GRPO); ∂r̂_j/∂logp_{j,t} = β mask_{j,t}."""
    logp, ref, mask, rewards = make_batch(seed=1, groups=3, g=4, t=6)
    logp.requires_grad_(True)
    beta, g, b = 0.8, 4, logp.shape[0]
    loss, _ = pacs_loss(logp, ref, mask, rewards, g, beta=beta, score=score, weighted=weighted)
    loss.backward()

    lp, rf, m, rw = logp.detach().tolist(), ref.tolist(), mask.tolist(), [int(x) for x in rewards.tolist()]
    r_hat = [beta * sum((a - c) * k for a, c, k in zip(lp[i], rf[i], m[i], strict=True)) for i in range(b)]
    psi = ref_rloo(r_hat, g) if score == "rloo" else ref_dr_grpo(r_hat, g)
    w = [float(x) for x in ref_weights(rw, g)] if weighted else [1.0] * b
    dl_dpsi = [w[i] * (sigmoid(psi[i]) - rw[i]) / b for i in range(b)]  # eq. 5
    cross = 1 / (g - 1) if score == "rloo" else 1 / g
    self_coef = 1.0 if score == "rloo" else 1 - 1 / g
    expected = torch.zeros(b, logp.shape[1])
    for j in range(b):
        start = (j // g) * g
        dl_drhat = sum(dl_dpsi[i] * (self_coef if i == j else -cross) for i in range(start, start + g))
        for t in range(logp.shape[1]):
            expected[j, t] = dl_drhat * beta * m[j][t]
    assert torch.allclose(logp.grad, expected, atol=1e-12)


@pytest.mark.parametrize("score", ["rloo", "grpo", "dr_grpo"])
def test_pacs_loss_passes_numerical_gradcheck(score):
    logp, ref, mask, rewards = make_batch(seed=9, groups=2, g=3, t=4)
    logp.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: pacs_loss(x, ref, mask, rewards, 3, 0.7, score)[0], (logp,))


def test_at_logp_equal_ref_loss_is_ln2_and_gradient_is_reinforce():
    """ψ = 0 ⇒ ℓ_i = ln 2, so L = ln2 · mean(w). ∂L/∂ψ_i = w_i (1/2 − R_i)/B; through RLOO and eq. 8 the
    gradient equals that of −1/B Σ_j A_j Σ_t mask logp_{j,t} with
    A_j = β [w_j (R_j − 1/2) − 1/(G−1) Σ_{i≠j, same group} w_i (R_i − 1/2)]."""
    _, _, mask, _ = make_batch(seed=2, groups=2, g=4, t=5)
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 1])
    logp = (-torch.rand(8, 5, generator=torch.Generator().manual_seed(5))).requires_grad_(True)
    ref = logp.detach().clone()
    beta, g, b = 1.5, 4, 8
    loss, metrics = pacs_loss(logp, ref, mask, rewards, g, beta=beta)
    loss.backward()

    rw = [int(x) for x in rewards.tolist()]
    w = ref_weights(rw, g)
    assert loss.item() == pytest.approx(math.log(2) * float(sum(w)) / b, abs=1e-12)
    assert metrics["prob_mean"] == pytest.approx(0.5)

    half = Fraction(1, 2)
    adv = []
    for j in range(b):
        start = (j // g) * g
        others = sum(w[i] * (rw[i] - half) for i in range(start, start + g) if i != j)
        adv.append(float(Fraction(beta).limit_denominator() * (w[j] * (rw[j] - half) - others / (g - 1))))
    logp2 = logp.detach().clone().requires_grad_(True)
    reinforce = -(torch.tensor(adv) * (logp2 * mask).sum(dim=1)).mean()
    reinforce.backward()
    assert torch.allclose(logp.grad, logp2.grad, atol=1e-12)
    assert logp.grad.abs().sum() > 0  # r̂ = 0 at the first update, its gradient is not


# ---------------------------------------------------------------------------------------------------
# invariances
# ---------------------------------------------------------------------------------------------------


def test_padding_values_change_nothing():
    logp, ref, mask, rewards = make_batch(seed=4)
    pad = torch.zeros(logp.shape[0], 3)
    mask2 = torch.cat([mask, pad], dim=1)
    logp_a = torch.cat([logp, pad], dim=1)
    garbage = torch.tensor([float("nan"), float("inf"), -1e30]).expand(logp.shape[0], 3)
    logp_b = torch.cat([torch.where(mask.bool(), logp, -1e30), garbage], dim=1)
    ref_b = torch.cat([torch.where(mask.bool(), ref, float("inf")), -garbage], dim=1)
    ref_a = torch.cat([ref, pad], dim=1)
    la, lb = logp_a.requires_grad_(True), logp_b.requires_grad_(True)
    loss_a, ma = pacs_loss(la, ref_a, mask2, rewards, 4)
    loss_b, mb = pacs_loss(lb, ref_b, mask2, rewards, 4)
    loss_a.backward()
    loss_b.backward()
    assert loss_a.item() == pytest.approx(loss_b.item(), abs=1e-12)
    assert ma == pytest.approx(mb)
    assert torch.equal(la.grad, lb.grad)
    assert torch.all(lb.grad[~mask2.bool()] == 0)


def test_permuting_rows_inside_a_group_permutes_the_outputs():
    logp, ref, mask, rewards = make_batch(seed=6)
    perm = torch.tensor([2, 0, 3, 1, 4, 5, 6, 7])  # shuffle inside group 0 only
    a = logp.clone().requires_grad_(True)
    p = logp[perm].clone().requires_grad_(True)
    loss_a, ma = pacs_loss(a, ref, mask, rewards, 4)
    loss_p, mp = pacs_loss(p, ref[perm], mask[perm], rewards[perm], 4)
    loss_a.backward()
    loss_p.backward()
    assert loss_a.item() == pytest.approx(loss_p.item(), abs=1e-12)
    assert ma == pytest.approx(mp)
    assert torch.allclose(a.grad[perm], p.grad, atol=1e-14)


def test_groups_are_independent():
    logp, ref, mask, rewards = make_batch(seed=7)
    logp2, ref2 = logp.clone(), ref.clone()
    logp2[4:] = logp2[4:] - 3.0  # change only group 1
    ref2[4:] = ref2[4:] + 1.0
    rewards2 = rewards.clone()
    rewards2[4:] = 1 - rewards2[4:]
    a = logp.clone().requires_grad_(True)
    b = logp2.clone().requires_grad_(True)
    pacs_loss(a, ref, mask, rewards, 4)[0].backward()
    pacs_loss(b, ref2, mask, rewards2, 4)[0].backward()
    assert torch.equal(a.grad[:4], b.grad[:4])
    assert not torch.equal(a.grad[4:], b.grad[4:])


# ---------------------------------------------------------------------------------------------------
# numerical stability
# ---------------------------------------------------------------------------------------------------


def test_huge_scores_give_finite_loss_and_gradients():
    # r̂ = ±5000 ⇒ |ψ| ≈ 6667: log(sigmoid(ψ)) would be −inf, the log-sigmoid form is exact
    t = 10
    logp = torch.zeros(4, t)
    logp[0] = 500.0
    logp[1] = -500.0
    logp.requires_grad_(True)
    ref = torch.zeros(4, t)
    mask = torch.ones(4, t)
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0])  # both big rows are badly wrong
    loss, metrics = pacs_loss(logp, ref, mask, rewards, 4)
    loss.backward()
    r_hat = [5000.0, -5000.0, 0.0, 0.0]
    psi = ref_rloo(r_hat, 4)
    w = [float(x) for x in ref_weights([0, 1, 0, 1], 4)]
    expected = sum(wi * bce_with_logits(p, r) for wi, p, r in zip(w, psi, [0, 1, 0, 1], strict=True)) / 4
    assert math.isfinite(loss.item()) and loss.item() == pytest.approx(expected, rel=1e-12)
    assert metrics["psi_abs_max"] == pytest.approx(max(abs(p) for p in psi))
    assert torch.isfinite(logp.grad).all()
    assert metrics["critic_accuracy"] == pytest.approx(
        sum((p > 0) == (r == 1) for p, r in zip(psi, [0, 1, 0, 1], strict=True)) / 4
    )


def test_float32_and_bfloat16_stay_finite():
    for dtype in (torch.float32, torch.bfloat16):
        logp = torch.full((4, 8), -1.0, dtype=dtype)
        logp[0] = 800.0
        logp.requires_grad_(True)
        ref = torch.full((4, 8), -1.0, dtype=dtype)
        loss, _ = pacs_loss(logp, ref, torch.ones(4, 8), torch.tensor([0.0, 1, 1, 0]), 4)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()


# ---------------------------------------------------------------------------------------------------
# every ValueError
# ---------------------------------------------------------------------------------------------------


def _ok():
    return make_batch(seed=8)


@pytest.mark.parametrize(
    ("mutate", "pattern"),
    [
        (lambda lp, rf, m, r, g: (lp[0], rf, m, r, g), "logp has shape"),
        (lambda lp, rf, m, r, g: (lp, rf[:, :-1], m, r, g), "ref_logp has shape"),
        (lambda lp, rf, m, r, g: (lp, rf, m[0], r, g), "mask must have shape"),
        (lambda lp, rf, m, r, g: (lp, rf, m, r[:-1], g), r"rewards must have shape \(8,\)"),
        (lambda lp, rf, m, r, g: (lp, rf, m, r[:, None], g), "rewards has shape"),
        (
            lambda lp, rf, m, r, g: (lp, rf, m, r, 3),
            "B=8 rows is not a multiple of group_size=3: that is 2 whole",
        ),
        (lambda lp, rf, m, r, g: (lp, rf, m, r, 1), "group_size=1 is too small"),
        (lambda lp, rf, m, r, g: (lp, rf, m, r, 4.0), "group_size must be an int"),
        (lambda lp, rf, m, r, g: (lp, rf, m, r * 0.5, g), "rewards must be 0 or 1"),
        (lambda lp, rf, m, r, g: (lp, rf, m, r + 1, g), "rewards must be 0 or 1"),
        (
            lambda lp, rf, m, r, g: (lp, rf, m, r.masked_fill(r == r, float("nan")), g),
            "rewards holds 8 non-finite",
        ),
        (lambda lp, rf, m, r, g: (lp.tolist(), rf, m, r, g), "logp must be a torch.Tensor"),
        (lambda lp, rf, m, r, g: (lp[:0], rf[:0], m[:0], r[:0], g), "the batch is empty"),
    ],
)
def test_pacs_loss_rejects_bad_inputs(mutate, pattern):
    args = mutate(*_ok(), 4)
    with pytest.raises(ValueError, match=pattern):
        pacs_loss(*args)


def test_pacs_loss_names_the_non_finite_tensor_but_ignores_padding():
    logp, ref, mask, rewards = _ok()
    bad = logp.clone()
    bad[2, 0] = float("nan")
    with pytest.raises(
        ValueError, match=r"logp holds 1 non-finite value\(s\) on response tokens \(first at row 2"
    ):
        pacs_loss(bad, ref, mask, rewards, 4)
    bad_ref = ref.clone()
    bad_ref[5, 0] = float("-inf")
    with pytest.raises(ValueError, match="ref_logp holds 1 non-finite"):
        pacs_loss(logp, bad_ref, mask, rewards, 4)
    padded = torch.where(mask.bool(), logp, float("nan"))
    loss, _ = pacs_loss(padded, ref, mask, rewards, 4)
    assert torch.isfinite(loss)


def test_unknown_score_and_small_groups_are_refused():
    logp, ref, mask, rewards = _ok()
    with pytest.raises(ValueError, match=r"unknown score 'ppo'.*\['rloo', 'grpo', 'dr_grpo'\]"):
        pacs_loss(logp, ref, mask, rewards, 4, score="ppo")
    with pytest.raises(ValueError, match="unknown score method 'mean'"):
        group_scores(torch.zeros(4), 2, "mean")
    with pytest.raises(ValueError, match=r"group_size=1 is too small: the leave-one-out baseline \(rloo\)"):
        group_scores(torch.zeros(4), 1, "rloo")
    with pytest.raises(ValueError, match=r"the group std \(grpo\)"):
        group_scores(torch.zeros(4), 1, "grpo")
    assert group_scores(torch.arange(4.0), 1, "dr_grpo").tolist() == [0.0] * 4  # G = 1 is fine without std
    with pytest.raises(ValueError, match=r"values must be a 1-D tensor of shape \(B,\), got \(2, 2\)"):
        group_scores(torch.zeros(2, 2), 2)
    with pytest.raises(ValueError, match="rewards must be a 1-D tensor"):
        class_balance_weights(torch.zeros(2, 2), 2)
    with pytest.raises(ValueError, match="rewards must be 0 or 1"):
        class_balance_weights(torch.tensor([0.0, 2.0]), 2)
    with pytest.raises(ValueError, match="not a multiple of group_size=4"):
        class_balance_weights(torch.tensor([0.0, 1.0]), 4)


def test_finite_groups_flags_whole_groups_and_ignores_padding():
    logp, ref, mask, rewards = make_batch(seed=10, groups=3, g=4, t=5)
    logp = torch.where(mask.bool(), logp, float("nan"))  # garbage in padding is fine
    assert finite_groups(mask, 4, rewards, logp=logp, ref_logp=ref).tolist() == [True, True, True]
    bad = logp.clone()
    bad[5, 0] = float("inf")  # row 5 → group 1
    r = rewards.clone()
    r[11] = float("nan")  # row 11 → group 2
    keep = finite_groups(mask, 4, r, logp=bad, ref_logp=ref)
    assert keep.tolist() == [True, False, False]
    rows = keep.repeat_interleave(4)
    loss, _ = pacs_loss(bad[rows], ref[rows], mask[rows], r[rows], 4)
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="not a multiple of group_size=5"):
        finite_groups(mask, 5, logp=logp)


def test_bool_and_int_masks_and_rewards_match_float():
    logp, ref, mask, rewards = make_batch(seed=12)
    want, wm = pacs_loss(logp, ref, mask, rewards, 4)
    for m, r in ((mask.bool(), rewards.bool()), (mask.long(), rewards.long())):
        got, gm = pacs_loss(logp, ref, m, r, 4)
        assert got.item() == pytest.approx(want.item(), abs=1e-12)
        assert gm == pytest.approx(wm)


# ---------------------------------------------------------------------------------------------------- critic AUC
def test_group_auc_hand_computed_with_ties():
    # group 1: correct rows score 3 and 1, wrong rows 2 and 1 -> pairs (3>2, 3>1, 1<2, 1=1): (1 + 1 + 0 + ½)/4
    # group 2: all wrong (no pair, left out); group 3: the correct row ranks above both wrong rows -> 1
    scores = torch.tensor([3.0, 2.0, 1.0, 1.0, 5.0, 4.0, 3.0, 2.0, 0.5, -1.0, 0.0, -2.0])
    rewards = torch.tensor([1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0])
    auc, groups = group_auc(scores, rewards, 4)
    assert groups == 2
    assert auc == pytest.approx((2.5 / 4 + 1.0) / 2)


def test_group_auc_is_one_half_for_constant_scores_and_nan_without_mixed_groups():
    rewards = torch.tensor([1, 0, 0, 1, 1, 1, 1, 1])
    assert group_auc(torch.zeros(8), rewards, 4) == (0.5, 1)  # the reference = rollout policy, first update
    auc, groups = group_auc(torch.randn(4), torch.tensor([1, 1, 1, 1]), 4)
    assert math.isnan(auc) and groups == 0


def test_group_auc_does_not_move_with_the_share_of_correct_rows():
    # a perfect ranking scores 1 whether 1 or 7 of 8 are correct; critic accuracy at ψ = 0 would not
    scores = torch.arange(8.0)
    for n_correct in (1, 4, 7):
        rewards = (torch.arange(8) >= 8 - n_correct).long()
        assert group_auc(scores, rewards, 8) == (1.0, 1)
        assert group_auc(-scores, rewards, 8) == (0.0, 1)


def test_pacs_loss_reports_the_critic_auc_of_psi():
    torch.manual_seed(0)
    logp, ref = torch.randn(8, 5), torch.randn(8, 5)
    mask = torch.ones(8, 5)
    rewards = torch.tensor([1, 0, 0, 1, 0, 0, 0, 0])
    _, metrics = pacs_loss(logp, ref, mask, rewards, group_size=4)
    psi = group_scores(reward_proxy(logp, ref, mask), 4)
    assert (metrics["critic_auc"], metrics["critic_auc_groups"]) == group_auc(psi, rewards, 4)
    assert metrics["critic_auc_groups"] == 1
