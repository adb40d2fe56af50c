"""Order statistics: quantiles of values per group, by selection (Numba)
or by sorting (the NumPy twin); both interpolate linearly, as
``np.quantile`` does, and agree exactly."""

from __future__ import annotations

import numpy as np
from numba import njit

from .intervals import _group_order_nb, _i64

__all__ = ["group_quantiles", "quantile_inplace", "quantile_pair_inplace"]


@njit(cache=True)
def _select(v, k):
    """Reorder v in place so that v[k] is its k-th smallest (0-based) and
    nothing after it is smaller (Hoare's quickselect, median-of-three)."""
    lo, hi = 0, len(v) - 1
    while hi > lo:
        mid = (lo + hi) // 2
        a, b, c = v[lo], v[mid], v[hi]
        pivot = max(min(a, b), min(max(a, b), c))
        i, j = lo, hi
        while i <= j:
            while v[i] < pivot:
                i += 1
            while v[j] > pivot:
                j -= 1
            if i <= j:
                v[i], v[j] = v[j], v[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return


@njit(cache=True)
def quantile_inplace(v, q):
    """Linear-interpolation quantile of v (reordered in place)."""
    n = len(v)
    x = q * (n - 1)
    r = int(np.floor(x))
    _select(v, r)
    a = v[r]
    b = v[r + 1:].min() if r + 1 < n else a
    return a + (b - a) * (x - r)


@njit(cache=True)
def quantile_pair_inplace(v, q1, q2):
    """``quantile_inplace`` of v at q1 ≤ q2 (v reordered in place): the
    second selection runs on what lies above the first's rank only."""
    n = len(v)
    x1, x2 = q1 * (n - 1), q2 * (n - 1)
    r1, r2 = int(np.floor(x1)), int(np.floor(x2))
    _select(v, r1)
    a1 = v[r1]
    if r2 == r1:
        b1 = v[r1 + 1:].min() if r1 + 1 < n else a1
        a2, b2 = a1, b1
    else:  # v[r1 + 1:] holds the ranks above r1
        up = v[r1 + 1:]
        k = r2 - r1 - 1
        _select(up, k)
        a2 = up[k]
        b1 = up[:k + 1].min()
        b2 = up[k + 1:].min() if r2 + 1 < n else a2
    return a1 + (b1 - a1) * (x1 - r1), a2 + (b2 - a2) * (x2 - r2)


@njit(cache=True)
def _quantiles_nb(values, group, n_groups, qs):
    order, starts = _group_order_nb(group, np.zeros(len(group), np.int64),
                                    n_groups)
    out = np.full((n_groups, len(qs)), np.nan)
    for g in range(n_groups):
        s, e = starts[g], starts[g + 1]
        if e == s:
            continue
        v = values[order[s:e]]  # a copy, reordered by each selection
        for k in range(len(qs)):
            out[g, k] = quantile_inplace(v, qs[k])
    return out


def _quantiles_np(values, group, n_groups, qs):
    o = np.lexsort((values, group))
    v = values[o]
    counts = np.bincount(group, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.full((n_groups, len(qs)), np.nan)
    have = counts > 0
    for k, q in enumerate(qs):
        x = q * (counts[have] - 1)
        lo = np.floor(x).astype(np.int64)
        hi = np.minimum(lo + 1, counts[have] - 1)
        vlo, vhi = v[starts[have] + lo], v[starts[have] + hi]
        out[have, k] = vlo + (vhi - vlo) * (x - lo)
    return out


def group_quantiles(values, group, n_groups: int, qs,
                    engine: str = "numba") -> np.ndarray:
    """(n_groups, len(qs)) quantiles of ``values`` per group (linear
    interpolation, as ``np.quantile``); NaN for an empty group."""
    values = np.ascontiguousarray(values, np.float64)
    group = _i64(group)
    qs = np.ascontiguousarray(qs, np.float64)
    f = _quantiles_nb if engine == "numba" else _quantiles_np
    return f(values, group, int(n_groups), qs)
