"""Order statistics: quantiles of values per group, by selection (Numba)
or by sorting (the NumPy twin); both interpolate linearly, as
``np.quantile`` does, and agree exactly."""

from __future__ import annotations

import numpy as np
from numba import njit

from .engines import _ro, resolve_engine
from .ordering import _group_order_nb

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
def _rank_pair(v, r):
    """(the r-th smallest of v, the (r+1)-th or itself if none), v reordered."""
    _select(v, r)
    return v[r], (v[r + 1:].min() if r + 1 < len(v) else v[r])


@njit(cache=True)
def _bracketed(v, r, lo, hi, buf):
    """The r-th and (r+1)-th smallest of v (as ``_rank_pair``) from one pass
    that counts the values below lo, at lo and at hi, and keeps only those
    strictly between (ties at a bracket's end, common in leads, need no
    selection); (nan, nan) when the rank lies outside [lo, hi] (the caller
    selects on all of v then)."""
    n = len(v)
    below = at_lo = at_hi = kept = 0
    above = np.inf
    for x in v:  # selects, not branches: where x falls is unpredictable
        below += x < lo
        at_lo += x == lo
        at_hi += (x == hi) & (hi > lo)
        buf[kept] = x
        kept += (x > lo) & (x < hi)
        above = min(above, x if x > hi else np.inf)
    part = buf[:kept]
    chosen = -1  # the rank selected in part, if any
    res = np.empty(2)
    for j in range(2):
        if r + j >= n:  # no (r+1)-th: the r-th again
            res[j] = res[0]
            continue
        k = r + j - below
        if k < 0:
            return np.nan, np.nan
        if k < at_lo:
            res[j] = lo
            continue
        k -= at_lo
        if k < kept:
            if chosen < 0:
                _select(part, k)
                chosen = k
                res[j] = part[k]
            else:  # the rank after the chosen one
                res[j] = part[chosen + 1:].min()
            continue
        k -= kept
        if k < at_hi:
            res[j] = hi
        elif j == 1 and k == at_hi:
            res[j] = above
        else:
            return np.nan, np.nan
    return res[0], res[1]


@njit(cache=True)
def quantile_pair_inplace(v, q1, q2):
    """``quantile_inplace`` of v at q1 and q2 (v may be reordered). A large
    v is read once per quantile, keeping only the values between two
    order statistics of a sample that bracket the rank; selecting among
    those few is exact, like selecting among all (which is the fallback)."""
    n = len(v)
    out = np.empty(2)
    qs = (q1, q2)
    m = 16384
    buf = np.empty(n if n >= 8 * m else 0)
    if n >= 8 * m:
        step = n // m
        sample = np.empty(m)
        for i in range(m):
            sample[i] = v[i * step]
        sample.sort()
    for w in range(2):
        x = qs[w] * (n - 1)
        r = int(np.floor(x))
        a = b = np.nan
        if n >= 8 * m:  # the sample rank's spread is ≤ √m / 2: ±4 of it
            t = int(r / n * m)
            a, b = _bracketed(v, r, sample[max(t - 256, 0)], sample[min(t + 256, m - 1)],
                              buf)
        if np.isnan(a):
            a, b = _rank_pair(v, r)
        out[w] = a + (b - a) * (x - r)
    return out[0], out[1]


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
                    engine: str = "auto") -> np.ndarray:
    """(n_groups, len(qs)) quantiles of ``values`` per group (linear
    interpolation, as ``np.quantile``); NaN for an empty group."""
    values, group, qs = _ro(values, np.float64), _ro(group), _ro(qs, np.float64)
    f = _quantiles_nb if resolve_engine(engine, len(values)) == "numba" else _quantiles_np
    return f(values, group, int(n_groups), qs)
