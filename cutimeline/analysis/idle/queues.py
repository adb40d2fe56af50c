"""Queue depth and CPU lead statistics per group of gpu rows, over windows.

The depth is one model, ``cutimeline.numeric.queuedepth``'s (the Chrome
export's counter reads it too; ``queue_series`` names it here as
before): work counts from its launch until it finishes, time-weighted
(``window_stats``). ``sample_stats`` is HTA's variant instead: +1 at
launch, −1 when the work begins, per change point, not time-weighted.
``lead_stats``: ``begin − launch`` of the rows beginning in a window.
Numba kernels, NumPy twins.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...numeric.engines import as_i64, empty_i64
from ...numeric.quantiles import group_quantiles, quantile_pair_inplace
from ...numeric.queuedepth import ascending_nb, merge_counts_nb, queue_series
from ...numeric.runs import gather_sorted
from ...timeline.schema import NONE

__all__ = ["queue_series", "window_stats", "window_stats_sorted", "sample_stats",
           "lead_stats", "SAMPLE_FIELDS"]

SAMPLE_FIELDS = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")
_LOWEST = -(2 ** 63)


@njit(cache=True)
def _window_stats_nb(P, M, starts, w0, w1, qs):
    G, W = len(starts) - 1, len(w0)
    mean, lo, hi = np.zeros((G, W)), np.zeros((G, W), np.int64), np.zeros((G, W), np.int64)
    quant = np.zeros((G, len(qs)))
    big = 2 ** 62
    a0, b0 = w0[0], w1[0]
    for g in range(G):
        s, e = starts[g], starts[g + 1]
        p, m = P[s:e], M[s:e]
        n = e - s
        area, mn, mx = np.zeros(W, np.int64), np.full(W, big), np.full(W, -big)
        # ns held per depth (≤ n); not np.zeros, which Numba fills (8 MB a
        # 10^6 rows): each entry zeroed when the walk first holds its depth
        hist = np.empty(n + 2, np.int64)
        hist[0] = 0
        i = j = depth = 0
        a = -big  # the segment [a, t) holds depth
        k = 1     # the current step window (steps: sorted, disjoint)
        ka, kb = (w0[1], w1[1]) if W > 1 else (big, big)
        k_area, k_lo, k_hi = 0, big, -big
        top = 0
        area0, lo0, hi0 = 0, big, -big  # window 0's, kept in registers
        while True:
            # the next change, +1 first at equal times; written as selects,
            # not branches: which one comes next is unpredictable
            pi = p[i] if i < n else big
            mj = m[j] if j < n else big
            take = pi <= mj
            t = pi if take else mj
            if t > a:
                ov = min(t, b0) - max(a, a0)
                if ov > 0:
                    area0 += depth * ov
                    if depth >= 0:  # its min and max come from hist after the walk
                        for d in range(top + 1, depth + 1):  # rarely: fresh memory
                            hist[d] = 0
                        top = max(top, depth)
                        hist[depth] += ov
                    else:
                        lo0, hi0 = min(lo0, depth), max(hi0, depth)
                if ka <= a and t <= kb:  # inside the current step: the usual case
                    k_area += depth * (t - a)
                    k_lo, k_hi = min(k_lo, depth), max(k_hi, depth)
                else:
                    while k < W:
                        ov = min(t, kb) - max(a, ka)
                        if ov > 0:
                            k_area += depth * ov
                            k_lo, k_hi = min(k_lo, depth), max(k_hi, depth)
                        if t < kb:
                            break
                        area[k], mn[k], mx[k] = k_area, k_lo, k_hi  # step k is over
                        k_area, k_lo, k_hi = 0, big, -big
                        k += 1
                        if k < W:
                            ka, kb = w0[k], w1[k]
            if t == big:
                break
            i += take
            j += 1 - take
            depth += 2 * take - 1
            a = t
        for d in range(top + 1):  # the depths ≥ 0 held in window 0: hist > 0
            if hist[d] > 0:
                lo0, hi0 = min(lo0, d), max(hi0, d)
        area[0], mn[0], mx[0] = area0, lo0, hi0
        for w in range(W):
            span = w1[w] - w0[w]
            if span > 0:
                mean[g, w] = area[w] / span
                lo[g, w], hi[g, w] = mn[w], mx[w]
        if b0 > a0:
            c = np.cumsum(hist[:top + 1]) / (b0 - a0)
            for q in range(len(qs)):
                quant[g, q] = np.searchsorted(c, qs[q] - 1e-12)
    return mean, lo, hi, quant


def _window_stats_np(P, M, starts, w0, w1, qs):
    t, d = queue_series(P, M, np.arange(len(P)), starts, engine="numpy")
    G, W = len(starts) - 1, len(w0)
    mean, lo, hi = np.zeros((G, W)), np.zeros((G, W), np.int64), np.zeros((G, W), np.int64)
    quant = np.zeros((G, len(qs)))
    big = 2 ** 62
    for g in range(G):
        tg = t[2 * starts[g]:2 * starts[g + 1]]
        dg = d[2 * starts[g]:2 * starts[g + 1]]
        # the step function as segments: depth 0 before the first change
        edges = np.concatenate([[-big], tg, [big]])
        depth = np.concatenate([[0], dg])
        # segment i is [edges[i], edges[i+1]); those meeting [a, b) are
        # i0..i1-1 (found by bisection, so the work is the window's length)
        i0 = np.maximum(np.searchsorted(edges, w0, side="right") - 1, 0)
        i1 = np.searchsorted(edges, w1, side="left")
        for w in range(W):
            a, b = w0[w], w1[w]
            if b <= a:
                continue
            seg = slice(i0[w], i1[w])
            ov = np.minimum(edges[1:][seg], b) - np.maximum(edges[:-1][seg], a)
            dw = depth[seg]
            held = ov > 0
            mean[g, w] = int(np.sum(dw[held] * ov[held])) / (b - a)
            lo[g, w], hi[g, w] = dw[held].min(), dw[held].max()
            if w == 0:
                ok = held & (dw >= 0)
                hist = np.bincount(dw[ok], weights=ov[ok].astype(np.float64))
                c = np.cumsum(hist) / (b - a)
                quant[g] = np.searchsorted(c, np.asarray(qs) - 1e-12)
    return mean, lo, hi, quant


def window_stats(plus, minus, order, starts, w0, w1, qs=(0.5, 0.95),
                 engine: str = "numba"):
    """Queue depth (+1 at ``plus``, −1 at ``minus``, rows grouped by
    ``order``/``starts``) over windows: (mean, min, max) arrays (groups ×
    windows), time-weighted, min and max over the depths held for some
    time; and (groups × qs) time-weighted quantiles over window 0 (the
    smallest depth held for at least that share of the window). The
    kernel needs windows 1.. sorted and disjoint (steps are); otherwise the
    twin computes them."""
    P = gather_sorted(plus, order, starts, engine)
    M = gather_sorted(minus, order, starts, engine)
    return window_stats_sorted(P, M, starts, w0, w1, qs, engine)


def window_stats_sorted(P, M, starts, w0, w1, qs=(0.5, 0.95), engine: str = "numba"):
    """``window_stats`` of groups whose +1 times ``P`` and −1 times ``M``
    are given sorted per group (``P[starts[g]:starts[g+1]]``)."""
    w0 = as_i64(np.atleast_1d(w0))
    w1 = as_i64(np.maximum(np.atleast_1d(w1), w0))
    args = (as_i64(P), as_i64(M), as_i64(starts), w0, w1, np.asarray(qs, np.float64))
    disjoint = bool(np.all(w0[2:] >= w1[1:-1]))
    f = _window_stats_nb if engine == "numba" and disjoint else _window_stats_np
    return f(*args)


@njit(cache=True)
def _rank(hist, r):
    """The r-th smallest sample (0-based) from counts per value."""
    c = 0
    for v in range(len(hist)):
        c += hist[v]
        if c > r:
            return v
    return len(hist) - 1


@njit(cache=True)
def _sample_stats_nb(plus, minus, order, starts):
    G = len(starts) - 1
    out = np.full((G, 8), np.nan)
    for g in range(G):
        s, e = starts[g], starts[g + 1]
        m = e - s
        if m == 0:
            out[g, 0] = 0
            continue
        p = ascending_nb(plus[order[s:e]])
        q = ascending_nb(minus[order[s:e]])
        bp, bm = merge_counts_nb(p, q)
        hist = np.zeros(m + 1, np.int64)
        total = sq = 0
        mn, mx = m, -m
        for i in range(m):  # the depth after each +1, then after each −1
            d = i + 1 - bp[i]
            total += d
            sq += d * d
            mn, mx = min(mn, d), max(mx, d)
            if d >= 0:
                hist[d] += 1
        for j in range(m):
            d = bm[j] - j - 1
            total += d
            sq += d * d
            mn, mx = min(mn, d), max(mx, d)
            if d >= 0:
                hist[d] += 1
        n = 2 * m
        out[g, 0], out[g, 1] = n, total / n
        out[g, 2] = np.sqrt(max(sq - total * total / n, 0.0) / (n - 1))
        out[g, 3], out[g, 7] = mn, mx
        if mn >= 0:
            for k, qq in enumerate((0.25, 0.5, 0.75)):
                x = qq * (n - 1)
                r = int(np.floor(x))
                a, b = _rank(hist, r), _rank(hist, min(r + 1, n - 1))
                out[g, 4 + k] = a + (b - a) * (x - r)
    return out


def _sample_stats_np(plus, minus, order, starts):
    t, d = queue_series(plus, minus, order, starts, engine="numpy")
    G = len(starts) - 1
    out = np.full((G, 8), np.nan)
    for g in range(G):
        v = d[2 * starts[g]:2 * starts[g + 1]]
        n = len(v)
        if n == 0:
            out[g, 0] = 0
            continue
        total, sq = int(v.sum()), int((v * v).sum())
        out[g, 0], out[g, 1] = n, total / n
        out[g, 2] = np.sqrt(max(sq - total * total / n, 0.0) / (n - 1))
        out[g, 3], out[g, 7] = v.min(), v.max()
        if v.min() >= 0:
            sv = np.sort(v)
            for k, qq in enumerate((0.25, 0.5, 0.75)):
                x = qq * (n - 1)
                r = int(np.floor(x))
                a, b = sv[r], sv[min(r + 1, n - 1)]
                out[g, 4 + k] = a + (b - a) * (x - r)
    return out


def sample_stats(plus, minus, order, starts, engine: str = "numba") -> np.ndarray:
    """(groups, 8) statistics named by ``SAMPLE_FIELDS`` of the queue
    depth after each change (launched at ``plus``, begun at ``minus``),
    as pandas ``describe`` gives them (std with ddof=1)."""
    args = (as_i64(plus), as_i64(minus), as_i64(order), as_i64(starts))
    return (_sample_stats_nb if engine == "numba" else _sample_stats_np)(*args)


@njit(cache=True)
def _lead_stats_nb(lead, begin, of_row, starts, w0, w1, one, summary):
    """One pass over the rows in row order (each group's rows into its
    slice of one buffer; ``one``: all rows in group 0, of_row not read),
    then two selections per group; sums in int64 (exact). One group whose
    rows all count (the usual case) is read in place: no buffer; no pass
    with a ``summary`` (count −1: none; ``lanes._prepare`` makes it)."""
    G = len(starts) - 1
    out = np.full((G, 4), np.nan)
    if one:
        total, m, top = summary
        if m < 0:
            total = m = 0
            top = _LOWEST
            for r in range(len(lead)):
                x = lead[r]
                ok = x != NONE and w0 <= begin[r] < w1
                total += x if ok else 0
                m += ok
                top = max(top, x if ok else _LOWEST)
        if m == len(lead) and m:
            out[0, 0], out[0, 3] = total / m, top
            out[0, 1], out[0, 2] = quantile_pair_inplace(lead, 0.5, 0.95, True)
            return out
    pos = starts[:-1].copy()
    total = np.zeros(G, np.int64)
    v = empty_i64(len(lead))  # the leads as they are: one kernel selects either way
    for r in range(len(lead)):
        x = lead[r]
        g = 0 if one else of_row[r]
        if x != NONE and g >= 0 and w0 <= begin[r] < w1:
            v[pos[g]] = x
            pos[g] += 1
            total[g] += x
    for g in range(G):
        m = pos[g] - starts[g]
        if m:
            seg = v[starts[g]:pos[g]]
            out[g, 0] = total[g] / m
            out[g, 3] = seg.max()
            out[g, 1], out[g, 2] = quantile_pair_inplace(seg, 0.5, 0.95, False)
    return out


def _lead_stats_np(lead, begin, order, starts, w0, w1):
    G = len(starts) - 1
    out = np.full((G, 4), np.nan)
    grp = np.repeat(np.arange(G), np.diff(starts))
    r = order
    ok = (lead[r] != NONE) & (begin[r] >= w0) & (begin[r] < w1)
    g, v = grp[ok], lead[r][ok].astype(np.float64)
    n = np.bincount(g, minlength=G)
    has = n > 0
    vi = lead[r][ok]
    for k in np.flatnonzero(has):  # summed in int64, as the kernel does
        out[k, 0] = vi[g == k].sum() / n[k]
    q = group_quantiles(v, g, G, [0.5, 0.95], engine="numpy")
    out[:, 1:3] = q
    mx = np.full(G, np.nan)
    np.fmax.at(mx, g, v)
    out[:, 3] = mx
    return out


def lead_stats(lead, begin, order, starts, w0: int, w1: int,
               engine: str = "numba", of_row=None, summary=None) -> np.ndarray:
    """(groups, 4): mean, median, p95, max of the CPU lead (ns) of the
    rows that begin in [w0, w1); NaN for a group without such rows.
    ``of_row`` (the group of each row, optional) spares the kernel
    reading the rows through ``order``. ``summary``: (sum, number, max)
    of the leads counted (not NONE, begun in the window), if known."""
    lead, begin, order, starts = as_i64(lead), as_i64(begin), as_i64(order), as_i64(starts)
    if engine == "numpy":
        return _lead_stats_np(lead, begin, order, starts, np.int64(w0), np.int64(w1))
    one = len(starts) == 2 and len(order) == len(lead)  # every row in the one group
    if not one and (of_row is None or len(order) != len(lead)):
        of_row = np.full(len(lead), NONE, np.int64)  # rows not in order: no group
        of_row[order] = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    of_row = as_i64(of_row) if not one else np.zeros(0, np.int64)
    summary = tuple(np.int64(x) for x in (summary or (0, -1, 0)))
    return _lead_stats_nb(lead, begin, of_row, starts, np.int64(w0), np.int64(w1), one,
                          summary)
