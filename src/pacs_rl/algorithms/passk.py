"""The unbiased pass@k estimator (Chen et al., 2021; PACS paper §4.1, eq. 10).

For a problem with n samples of which c are correct, the probability that k samples drawn without
replacement contain at least one correct one is

    pass@k = 1 − C(n−c, k) / C(n, k)                                   (10)
           = 1 − Π_{i=n−c+1}^{n} (1 − k/i)                             (product form)

The product form avoids the huge binomials (C(4096, 2048) has ~1,200 digits). It is evaluated in log
space, log Π = Σ log1p(−k/i), and 1 − exp(·) as −expm1(·), so both tiny and near-one values keep full
float64 relative precision. When n − c < k every draw holds a correct sample and pass@k = 1 exactly.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence

import numpy as np


def _as_int_array(name: str, values) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype == bool or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        raise ValueError(f"pass_at_k: {name} must hold integers, got {values!r} (dtype {array.dtype}).")
    if np.issubdtype(array.dtype, np.floating):
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise ValueError(f"pass_at_k: {name} must hold whole numbers, got {values!r}.")
        array = array.astype(np.int64)
    return array.astype(np.int64)


def _single(n: int, c: int, k: int) -> float:
    """pass@k for one problem, n >= k >= 1, 0 <= c <= n (checked by the caller)."""
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    if c == 0:
        return 0.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(-np.expm1(np.sum(np.log1p(-k / i))))  # 1 − Π (1 − k/i)


def pass_at_k(n, c, k: int):
    """Unbiased pass@k (eq. 10) for each problem, given its sample count n and correct count c.

    Args:
        n: samples per problem, an int or an array-like of ints, shape (P,) or any shape.
        c: correct samples per problem, broadcastable against n.
        k: the k of pass@k, an int with 1 <= k <= every n.

    Returns:
        a float when n and c are scalars, else a float64 array of the broadcast shape of n and c.

    Raises:
        ValueError: k < 1, k > n, c > n, or a negative / non-integer count (the message names the values).
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        if isinstance(k, float) and k.is_integer():
            k = int(k)
        else:
            raise ValueError(f"pass_at_k: k must be a positive integer, got {k!r}.")
    k = int(k)
    scalar = np.ndim(n) == 0 and np.ndim(c) == 0
    n_arr, c_arr = np.broadcast_arrays(_as_int_array("n", n), _as_int_array("c", c))
    if k < 1:
        raise ValueError(f"pass_at_k: k must be >= 1, got k={k}.")
    if np.any(n_arr < 0) or np.any(c_arr < 0):
        raise ValueError(f"pass_at_k: counts must be >= 0, got n={n!r}, c={c!r}.")
    bad = np.flatnonzero(c_arr.ravel() > n_arr.ravel())
    if bad.size:
        j = bad[0]
        raise ValueError(
            f"pass_at_k: c={c_arr.ravel()[j]} correct samples exceed n={n_arr.ravel()[j]} samples "
            f"(problem index {j}); c counts correct samples among the n drawn."
        )
    bad = np.flatnonzero(n_arr.ravel() < k)
    if bad.size:
        j = bad[0]
        raise ValueError(
            f"pass_at_k: k={k} is larger than n={n_arr.ravel()[j]} samples (problem index {j}); "
            f"use k <= n or draw at least {k} samples per problem."
        )
    out = np.array(
        [_single(int(a), int(b), k) for a, b in zip(n_arr.ravel(), c_arr.ravel(), strict=True)],
        dtype=np.float64,
    )
    out = out.reshape(n_arr.shape)
    return float(out) if scalar else out


def mean_pass_at_k(
    ns: Sequence[int] | np.ndarray, cs: Sequence[int] | np.ndarray, ks: Iterable[int]
) -> dict[int, float]:
    """The benchmark score: pass@k averaged over problems (eq. 10's expectation), for every k in ``ks``.

    Args:
        ns: samples per problem, shape (P,) (an int is broadcast to every problem).
        cs: correct samples per problem, shape (P,).
        ks: the k values; each must be <= every n.

    Returns:
        {k: mean pass@k} in the order of ``ks``.
    """
    cs = np.asarray(cs)
    if cs.size == 0:
        raise ValueError("mean_pass_at_k: no problems given (cs is empty); nothing to average.")
    return {int(k): float(np.mean(pass_at_k(ns, cs, k))) for k in ks}
