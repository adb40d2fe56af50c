"""Order statistics: quantiles of values per group, by selection (Numba)
or by sorting (the NumPy twin); both interpolate linearly, as
``np.quantile`` does, and agree exactly."""

from __future__ import annotations

import numpy as np
from numba import njit

from .engines import readonly, resolve_engine
from .ordering import group_order_nb

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
def _bracket_pass(v, lo1, hi1, buf1, lo2, hi2, buf2):
    """One pass over v for two brackets [lo, hi]: per bracket, how many
    values lie below lo, at lo, at hi, strictly between (kept in buf).
    Ties at a bracket's end, common in leads, need no selection. Only
    "below" is a select per value; a bracket holds a few % of the values,
    so the branch into it is predicted (selects for all four counts and an
    unconditional store ran 2.5× slower); the smallest value above hi,
    rarely needed, is ``_above``'s."""
    below1 = at_lo1 = at_hi1 = kept1 = 0
    below2 = at_lo2 = at_hi2 = kept2 = 0
    for x in v:
        below1 += x < lo1
        below2 += x < lo2
        if x >= lo1 and x <= hi1:
            if x == lo1:
                at_lo1 += 1
            elif x == hi1:
                at_hi1 += 1
            else:
                buf1[kept1] = x
                kept1 += 1
        if x >= lo2 and x <= hi2:
            if x == lo2:
                at_lo2 += 1
            elif x == hi2:
                at_hi2 += 1
            else:
                buf2[kept2] = x
                kept2 += 1
    return (below1, at_lo1, at_hi1, kept1), (below2, at_lo2, at_hi2, kept2)


@njit(cache=True)
def _above(v, hi):
    """The smallest value of v above hi (inf if none)."""
    above = np.inf
    for x in v:
        above = min(above, x if x > hi else np.inf)
    return above


@njit(cache=True)
def _bracketed(v, r, lo, hi, buf, counts):
    """The r-th and (r+1)-th smallest of the values v (as ``_rank_pair``)
    from a bracket's ``counts`` (``_bracket_pass``) and the values kept
    in buf; (nan, nan) when the rank lies outside [lo, hi] (the caller
    selects on all values then)."""
    below, at_lo, at_hi, kept = counts
    n = len(v)
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
            res[j] = _above(v, hi)
        else:
            return np.nan, np.nan
    return res[0], res[1]


@njit(cache=True)
def quantile_pair_inplace(v, q1, q2, keep=False):
    """``quantile_inplace`` of v at q1 and q2 (v may be reordered, unless
    ``keep``: then a copy is, when one must be; v may be ints). A large
    v is read once for both quantiles, keeping only the values between
    two order statistics of a sample that bracket each rank; selecting
    among those few is exact, like selecting among all (which is the
    fallback)."""
    n = len(v)
    out = np.empty(2)
    qs = (q1, q2)
    m = 16384
    big = n >= 8 * m
    ranks = np.empty(2, np.int64)
    for w in range(2):
        ranks[w] = int(np.floor(qs[w] * (n - 1)))
    found = np.full((2, 2), np.nan)
    if big:  # the sample rank's spread is ≤ √m / 2: ±4 of it
        step = n // m
        sample = np.empty(m)
        for i in range(m):
            sample[i] = v[i * step]
        sample.sort()
        lo, hi = np.empty(2), np.empty(2)
        for w in range(2):
            t = int(ranks[w] / n * m)
            lo[w], hi[w] = sample[max(t - 256, 0)], sample[min(t + 256, m - 1)]
        buf1, buf2 = np.empty(n), np.empty(n)
        c1, c2 = _bracket_pass(v, lo[0], hi[0], buf1, lo[1], hi[1], buf2)
        found[0, 0], found[0, 1] = _bracketed(v, ranks[0], lo[0], hi[0], buf1, c1)
        found[1, 0], found[1, 1] = _bracketed(v, ranks[1], lo[1], hi[1], buf2, c2)
    for w in range(2):
        x = qs[w] * (n - 1)
        r = ranks[w]
        a, b = found[w, 0], found[w, 1]
        if np.isnan(a):
            if keep:  # selecting reorders: a copy, once
                v, keep = v.copy(), False
            a, b = _rank_pair(v, r)
        out[w] = a + (b - a) * (x - r)
    return out[0], out[1]


@njit(cache=True)
def _quantiles_nb(values, group, n_groups, qs):
    order, starts = group_order_nb(group, np.zeros(len(group), np.int64),
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
    values, group, qs = readonly(values, np.float64), readonly(group), readonly(qs, np.float64)
    f = _quantiles_nb if resolve_engine(engine, len(values)) == "numba" else _quantiles_np
    return f(values, group, int(n_groups), qs)
