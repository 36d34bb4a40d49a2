"""The fast samplers draw from exactly softmax(logits / T) (and its nucleus), checked by chi-square.

Each test uses a fixed seed, so it is deterministic; the acceptance level p > 1e-4 is strict enough
that the power checks below (a 10% error on one token's probability) fail it by a wide margin.
"""

from __future__ import annotations

import pytest
import torch

from pacs_rl.sampling.ops import (
    inverse_cdf_sample,
    nucleus_keep_mask,
    reference_probs,
    sample_next_token,
)

ALPHA = 1e-4


def chi_square_pvalue(samples: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit of integer ``samples`` to ``probs`` (V,).

    Cells with expected count < 5 are pooled into one cell (the usual validity rule). A sample in a
    zero-probability cell makes the p-value 0.
    """
    probs = probs.double()
    n = samples.numel()
    observed = torch.bincount(samples, minlength=probs.numel()).double()
    if (observed[probs == 0] > 0).any():
        return 0.0
    expected = probs * n
    big = expected >= 5
    obs = torch.cat([observed[big], observed[~big & (probs > 0)].sum().view(1)])
    exp = torch.cat([expected[big], expected[~big & (probs > 0)].sum().view(1)])
    obs, exp = obs[exp > 0], exp[exp > 0]
    if obs.numel() < 2:
        raise ValueError("chi-square needs at least two cells with positive probability")
    stat = ((obs - exp) ** 2 / exp).sum()
    df = obs.numel() - 1
    # chi2 survival function: Q(df/2, stat/2), the regularised upper incomplete gamma function.
    return float(torch.special.gammaincc(torch.tensor(df / 2.0), stat / 2.0))


LOGITS = torch.tensor(
    [2.0, 1.5, 1.0, 0.8, 0.5, 0.3, 0.0, -0.2, -0.5, -0.7, -1.0, -1.5, -2.0, -3.0, 1.2, 0.9, -0.1, -4.0]
)


def draw(logits: torch.Tensor, n: int, seed: int, **kw) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return sample_next_token(logits.expand(n, -1), generator=g, **kw)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_temperature_sampling_matches_softmax(temperature):
    samples = draw(LOGITS, 200_000, seed=0, temperature=temperature)
    target = torch.softmax(LOGITS.double() / temperature, -1)
    assert chi_square_pvalue(samples, target) > ALPHA


def test_chi_square_has_power():
    """The same check rejects a distribution that is off by 10% on one token, or at another T."""
    samples = draw(LOGITS, 200_000, seed=0, temperature=1.0)
    wrong = torch.softmax(LOGITS.double(), -1)
    wrong[3] *= 1.1
    wrong /= wrong.sum()
    assert chi_square_pvalue(samples, wrong) < ALPHA
    assert chi_square_pvalue(samples, torch.softmax(LOGITS.double() / 0.9, -1)) < ALPHA


def test_nucleus_keep_mask_by_hand():
    # mass before each token: 0, 1/2, 3/4, 7/8 (dyadic, so exact in floating point)
    probs = torch.tensor([[0.5, 0.25, 0.125, 0.125]])
    assert nucleus_keep_mask(probs, 0.75).tolist() == [[True, True, False, False]]
    assert nucleus_keep_mask(probs, 0.76).tolist() == [[True, True, True, False]]
    assert nucleus_keep_mask(probs, 0.3).tolist() == [[True, False, False, False]]
    assert nucleus_keep_mask(probs, 1.0).tolist() == [[True, True, True, True]]


def test_reference_nucleus_equals_hf_top_p_warper():
    """Our nucleus set is the one transformers' TopPLogitsWarper keeps (random rows, several p)."""
    from transformers.generation.logits_process import TopPLogitsWarper

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(64, 300, generator=g) * 2
    for top_p in (0.3, 0.7, 0.9, 0.95):
        hf_kept = torch.isfinite(TopPLogitsWarper(top_p)(None, logits.clone()))
        ours = reference_probs(logits, 1.0, top_p) > 0
        assert torch.equal(hf_kept, ours), top_p


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 0.9), (0.6, 0.95), (1.3, 0.5)])
def test_top_p_sampling_matches_nucleus(temperature, top_p):
    samples = draw(LOGITS, 200_000, seed=1, temperature=temperature, top_p=top_p)
    target = reference_probs(LOGITS[None], temperature, top_p)[0]
    assert (target == 0).any()  # the nucleus really cuts something at these settings
    assert chi_square_pvalue(samples, target) > ALPHA  # 0 if any token outside the nucleus appears


def test_top_p_grows_k_past_first_guess():
    """A nearly flat distribution over 1,000 tokens (distinct logits, so the nucleus has no ties): at
    p=0.9 it holds ~880 tokens, far more than the first topk guess (64), and no token outside it is
    ever drawn."""
    logits = torch.linspace(0.5, 0.0, 1000)
    samples = draw(logits, 20_000, seed=2, temperature=1.0, top_p=0.9)
    target = reference_probs(logits[None], 1.0, 0.9)[0]
    assert int((target > 0).sum()) > 64 * 8
    assert chi_square_pvalue(samples, target) > ALPHA


def test_two_level_inverse_cdf_matches_weights():
    """The block path (here block=8 over 103 tokens, so the last block is padded) is exact."""
    g = torch.Generator().manual_seed(3)
    weights = torch.softmax(torch.randn(103, generator=g) * 1.5, -1)
    samples = inverse_cdf_sample(weights.expand(200_000, -1), torch.Generator().manual_seed(4), block=8)
    assert int(samples.max()) < 103
    assert chi_square_pvalue(samples, weights.double() / weights.double().sum()) > ALPHA


def test_large_vocab_path_never_draws_zero_weight_tokens():
    """Default block size on a 49,152-token vocabulary: only the 5 tokens with mass are drawn, in
    proportion to their weights."""
    weights = torch.zeros(128, 49_152)
    support = torch.tensor([3, 300, 20_000, 40_000, 49_151])
    weights[:, support] = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5])
    counts = torch.zeros(49_152, dtype=torch.long)
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        counts += torch.bincount(inverse_cdf_sample(weights, g), minlength=49_152)
    assert set(counts.nonzero().squeeze(1).tolist()) <= set(support.tolist())
    target = torch.zeros(49_152, dtype=torch.float64)
    target[support] = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.5], dtype=torch.float64) / 10.5
    samples = torch.repeat_interleave(torch.arange(49_152), counts)
    assert chi_square_pvalue(samples, target) > ALPHA


def test_greedy_is_argmax_and_temperature_zero_ignores_top_p():
    logits = torch.randn(32, 50, generator=torch.Generator().manual_seed(6))
    assert torch.equal(sample_next_token(logits, 0.0), logits.argmax(-1))
    assert torch.equal(sample_next_token(logits, 0.0, top_p=0.5), logits.argmax(-1))


def test_same_seed_same_draws():
    a = draw(LOGITS, 1000, seed=7, temperature=1.0, top_p=0.9)
    b = draw(LOGITS, 1000, seed=7, temperature=1.0, top_p=0.9)
    c = draw(LOGITS, 1000, seed=8, temperature=1.0, top_p=0.9)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
