"""pass@k (eq. 10) against exact rational arithmetic."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest

from pacs_rl.algorithms.passk import mean_pass_at_k, pass_at_k


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """1 − C(n−c,k)/C(n,k) with integers only (math.comb is 0 when n−c < k)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_hand_computed_values():
    # n=2, c=1, k=1: half the single draws are correct.
    assert pass_at_k(2, 1, 1) == pytest.approx(0.5, rel=1e-15)
    # n=4, c=1, k=2: 1 − C(3,2)/C(4,2) = 1 − 3/6.
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5, rel=1e-15)
    # n=5, c=2, k=2: 1 − C(3,2)/C(5,2) = 1 − 3/10.
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7, rel=1e-15)
    # pass@1 is the fraction correct.
    assert pass_at_k(32, 7, 1) == pytest.approx(7 / 32, rel=1e-15)
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 8, 3) == 1.0  # n − c = 2 < k: every 3-subset holds a correct one
    assert isinstance(pass_at_k(10, 3, 2), float)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_grid_matches_fractions(seed):
    rng = random.Random(seed)
    cases = []
    for n in [1, 2, 3, 8, 32, 100, 512, 1000, 4096]:
        for _ in range(6):
            k = rng.randint(1, n)
            c = rng.randint(0, n)
            cases.append((n, c, k))
    # the extremes at n = 4096: very rare correct samples and large k
    cases += [
        (4096, 1, 1),
        (4096, 1, 4096),
        (4096, 1, 2048),
        (4096, 4095, 1),
        (4096, 2, 3),
        (4096, 1000, 256),
    ]
    for n, c, k in cases:
        got = pass_at_k(n, c, k)
        want = exact_pass_at_k(n, c, k)
        if want == 0:
            assert got == 0.0
        else:
            assert abs(Fraction(got) - want) / want < Fraction(1, 10**11), (n, c, k, got, float(want))


def test_vectorised_equals_elementwise():
    rng = np.random.default_rng(3)
    n = rng.integers(16, 600, size=50)
    c = np.array([rng.integers(0, m + 1) for m in n])
    got = pass_at_k(n, c, 16)
    assert got.shape == (50,) and got.dtype == np.float64
    for i in range(50):
        assert got[i] == pytest.approx(float(exact_pass_at_k(int(n[i]), int(c[i]), 16)), rel=1e-11)
    # lists and a scalar n broadcast against c
    assert list(pass_at_k(4, [0, 1, 4], 2)) == pytest.approx([0.0, 0.5, 1.0])


def test_monotone_in_k_and_c():
    ks = [1, 2, 4, 8, 16, 32]
    values = [pass_at_k(32, 5, k) for k in ks]
    assert all(a < b for a, b in itertools.pairwise(values))
    by_c = pass_at_k(32, np.arange(33), 4)
    assert np.all(np.diff(by_c) >= 0)


def test_mean_pass_at_k():
    # two problems, n = 4: c = 1 -> pass@2 = 1/2, c = 4 -> 1; mean 3/4. pass@1: (1/4 + 1)/2.
    assert mean_pass_at_k([4, 4], [1, 4], [1, 2]) == pytest.approx({1: 0.625, 2: 0.75})
    assert list(mean_pass_at_k(8, [0, 8, 3], [4, 1])) == [4, 1]


@pytest.mark.parametrize(
    ("n", "c", "k", "fragment"),
    [
        (4, 1, 5, "k=5 is larger than n=4"),
        ([8, 3], [1, 1], 4, "n=3"),
        (4, 5, 1, "c=5 correct samples exceed n=4"),
        (4, -1, 1, ">= 0"),
        (4, 1, 0, "k must be >= 1"),
        (4, 1.5, 1, "whole numbers"),
    ],
)
def test_errors_name_the_values(n, c, k, fragment):
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_rejects_empty():
    with pytest.raises(ValueError, match="no problems"):
        mean_pass_at_k([], [], [1])
