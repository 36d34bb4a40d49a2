"""Statistics of a comparison: mean ± standard error over seeds, and paired tests between methods on the
same problems.

Paired test. For methods A and B evaluated on the same P problems, let d_p be the per-problem pass@1
difference (A − B), each averaged over the seeds of A and of B. Under H0 "A and B are exchangeable on
every problem", each d_p is as likely to be +|d_p| as −|d_p|, so the sign-flip permutation distribution
of the mean d̄ is

    p = P( |Σ_p s_p |d_p|| >= |Σ_p d_p| ),   s_p ∈ {−1, +1} uniform                       (S1)

computed exactly over all 2^m sign patterns when the m non-zero d_p are few (m <= 20), and by Monte
Carlo otherwise (with the +1 correction, p = (1 + #{|T*| >= |T|}) / (1 + draws)). Zero differences
carry no sign and do not change the count. The standard error of d̄ is sd(d)/√P (S2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

EXACT_LIMIT = 20  # at most 2^20 sign patterns are enumerated


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error (sample std with ddof=1, / √n) of ``values``; SE is nan for one value."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), math.nan
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))


def sign_flip_test(
    diffs: Sequence[float], *, n_draws: int = 100_000, seed: int = 0, exact_limit: int = EXACT_LIMIT
) -> dict[str, float | int | str]:
    """Two-sided paired sign-flip permutation test of mean(diffs) = 0 (S1).

    Args:
        diffs: per-problem paired differences, shape (P,).
        n_draws: Monte-Carlo sign patterns when more than ``exact_limit`` differences are non-zero.
        seed: RNG seed of the Monte-Carlo draws.

    Returns:
        {"p_value", "mean", "se" (S2), "n" (problems), "n_nonzero", "method": "exact" | "monte-carlo"}.
    """
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError(f"sign_flip_test: need a non-empty 1-d array of differences, got shape {d.shape}.")
    if not np.all(np.isfinite(d)):
        raise ValueError("sign_flip_test: differences contain nan/inf; drop those problems first.")
    mean, se = mean_se(d)
    nz = np.abs(d[d != 0])
    m = nz.size
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, float(nz.sum()) if m else 1.0)
    if m == 0:
        return {"p_value": 1.0, "mean": mean, "se": se, "n": int(d.size), "n_nonzero": 0, "method": "exact"}
    if m <= exact_limit:
        # every sign pattern: bit j of pattern i gives the sign of |d_j|
        patterns = np.arange(2**m, dtype=np.int64)[:, None]
        signs = 1 - 2 * ((patterns >> np.arange(m)) & 1)  # (2^m, m) of ±1
        stats = np.abs(signs @ nz)  # (2^m,)
        p = float(np.mean(stats >= observed - tol))
        method = "exact"
    else:
        rng = np.random.default_rng(seed)
        hits = 0
        for start in range(0, n_draws, 10_000):
            k = min(10_000, n_draws - start)
            signs = rng.choice([-1.0, 1.0], size=(k, m))
            hits += int(np.sum(np.abs(signs @ nz) >= observed - tol))
        p = (1 + hits) / (1 + n_draws)
        method = "monte-carlo"
    return {"p_value": p, "mean": mean, "se": se, "n": int(d.size), "n_nonzero": int(m), "method": method}


def wilcoxon_p(diffs: Sequence[float]) -> float | None:
    """Two-sided Wilcoxon signed-rank p-value (scipy), or None where it is not defined (no non-zero difference)."""
    from scipy.stats import wilcoxon  # slow to import: loaded on first use

    d = np.asarray(diffs, dtype=np.float64)
    if np.count_nonzero(d) == 0:
        return None
    try:
        return float(wilcoxon(d, zero_method="wilcox").pvalue)
    except ValueError:
        return None


def paired_interval(diffs: Sequence[float], target: float | None = None) -> dict:
    """Mean of paired differences (one per seed: method A's score minus method B's), its 95% Student-t interval
    and half-width, and the pairs (at this SD) a half-width of ``target`` needs (not computed when ``target`` is
    None)."""
    from scipy.stats import norm, t  # slow to import: loaded on first use

    n = len(diffs)
    out: dict = {"pairs": n, "mean": sum(diffs) / n if n else None}
    if n < 2:
        return out
    mean = out["mean"]
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (n - 1))
    half = float(t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    out.update(sd=sd, half_width=half, ci95=[mean - half, mean + half])
    if target is not None:
        # the normal quantile's answer is a lower bound (t > z); step up from it to the first n that reaches it
        needed = max(2, math.ceil((float(norm.ppf(0.975)) * sd / target) ** 2))
        while t.ppf(0.975, needed - 1) * sd / math.sqrt(needed) > target:
            needed += 1
        out["pairs_needed"] = needed
    return out
