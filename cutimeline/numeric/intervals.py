"""Interval kernels: the union of intervals, the gaps between them, coverage.

Each kernel has a Numba version and a NumPy twin that give equal results
(see ``engines.py``). Conventions: times are int64 ns; rows are addressed
through an ``order`` array grouped by a dense group id and, within a group,
sorted by begin (``ordering.group_order``); ``starts[g]:starts[g + 1]`` is
group g's slice of ``order``. ``NONE`` (-1) marks an absent launch time.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..timeline.schema import NONE
from .engines import I64_MAX, as_i64, readonly, empty_i64, resolve_engine, warm_probe
from .ordering import is_sorted_nb, group_order

__all__ = ["merge", "merge_lean", "union", "coverage", "count_le"]


# -- union and gaps -----------------------------------------------------------

@warm_probe
@njit(cache=True)
def _merge_nb(begin, end, launch, order, starts, lo, hi, lean=False):
    """``lean``: ig and first left empty (fresh memory costs more than the
    walk); istart, the groups' interval bounds, is returned last."""
    n, G = len(order), len(starts) - 1
    ig = empty_i64(0 if lean else n)
    ib = empty_i64(n)
    ie = empty_i64(n)
    first = empty_i64(0 if lean else n)
    istart = np.zeros(G + 1, np.int64)
    gg = empty_i64(n + G)
    gb = empty_i64(n + G)
    ge = empty_i64(n + G)
    gnext = empty_i64(n + G)
    gprev = empty_i64(n + G)
    lam = np.full(G, NONE, np.int64)
    k = 0
    m = 0
    for g in range(G):
        s, e = starts[g], starts[g + 1]
        j = s
        prev_end, prev_row = lo, NONE
        while j < e:
            r = order[j]
            b0, top, f, last = begin[r], end[r], r, r
            fl = launch[r] if launch[r] != NONE else I64_MAX
            while True:
                if launch[r] != NONE:
                    d = max(begin[r] - launch[r], 0)
                    if lam[g] == NONE or d < lam[g]:
                        lam[g] = d
                j += 1
                if j >= e or begin[order[j]] > top:
                    break
                r = order[j]
                if end[r] > top:
                    top, last = end[r], r
                if begin[r] == b0:  # same start: the earliest-launched leads
                    lr = launch[r] if launch[r] != NONE else I64_MAX
                    if lr < fl:
                        f, fl = r, lr
            if b0 > prev_end:
                gg[m], gb[m], ge[m], gnext[m], gprev[m] = g, prev_end, b0, f, prev_row
                m += 1
            if not lean:
                ig[k], first[k] = g, f
            ib[k], ie[k] = b0, top
            k += 1
            if top > prev_end:
                prev_end, prev_row = top, last
        if prev_end < hi:
            gg[m], gb[m], ge[m], gnext[m], gprev[m] = g, prev_end, hi, NONE, prev_row
            m += 1
        istart[g + 1] = k
    return (ig[:k], ib[:k], ie[:k], first[:k], gg[:m], gb[:m], ge[:m],
            gnext[:m], gprev[:m], lam, istart)


def _group_cummax(x, grp):
    """Running maximum of x restarting at each group (grp sorted)."""
    if len(x) == 0:
        return x.copy()
    # stack the groups apart so that one cumulative max serves them all
    t0 = x.min()
    span = int(x.max() - t0) + 1
    if int(grp[-1]) * span < 2**62:
        return np.maximum.accumulate(grp * span + (x - t0)) - grp * span + t0
    cuts = np.flatnonzero(np.diff(grp)) + 1
    return np.concatenate([np.maximum.accumulate(p) for p in np.split(x, cuts)])


def _merge_np(begin, end, launch, order, starts, lo, hi):
    n, G = len(order), len(starts) - 1
    e0 = np.zeros(0, np.int64)
    lam = np.full(G, NONE, np.int64)
    grp = np.repeat(np.arange(G, dtype=np.int64), np.diff(starts))
    b, e, la = begin[order], end[order], launch[order]
    ok = la != NONE
    if ok.any():
        d = np.maximum(b[ok] - la[ok], 0)
        lam_ok = np.full(G, I64_MAX, np.int64)
        np.minimum.at(lam_ok, grp[ok], d)
        lam = np.where(lam_ok == I64_MAX, NONE, lam_ok)
    if n == 0:
        gaps_g = np.arange(G, dtype=np.int64) if lo < hi else e0
        full = np.full(len(gaps_g), lo, np.int64)
        none = np.full(len(gaps_g), NONE, np.int64)
        return (e0, e0, e0, e0, gaps_g, full, np.full(len(gaps_g), hi, np.int64),
                none, none.copy(), lam)
    top = _group_cummax(e, grp)
    new_group = np.ones(n, bool)
    new_group[1:] = grp[1:] != grp[:-1]
    head = new_group.copy()
    head[1:] |= b[1:] > top[:-1]
    idx = np.flatnonzero(head)
    ib, ig = b[idx], grp[idx]
    ie = np.maximum.reduceat(e, idx)
    iid = np.cumsum(head) - 1
    lk = np.where(la == NONE, I64_MAX, la)
    cand = np.where(b == ib[iid], lk, I64_MAX)
    best = np.minimum.reduceat(cand, idx)
    hit = np.flatnonzero((b == ib[iid]) & (cand == best[iid]))
    first = order[hit[np.searchsorted(iid[hit], np.arange(len(idx)))]]
    # the row that ends each interval: the first to reach its largest end
    tops = np.flatnonzero(e == ie[iid])
    last = order[tops[np.searchsorted(iid[tops], np.arange(len(idx)))]]
    # gaps: before each interval (from the group's running end, or lo) and
    # after each group's last interval (up to hi); the row before a gap is
    # the one that set the running end
    run = _group_cummax(ie, ig)
    grp_first = np.ones(len(idx), bool)
    grp_first[1:] = ig[1:] != ig[:-1]
    prev_end = np.empty(len(idx), np.int64)
    prev_end[1:] = run[:-1]
    prev_end[grp_first] = lo
    prev_end = np.maximum(prev_end, lo)
    raised = ie > prev_end
    holder = _group_cummax(np.where(raised, np.arange(len(idx)), -1), ig)
    prev_holder = np.empty(len(idx), np.int64)
    prev_holder[1:] = holder[:-1]
    prev_holder[grp_first] = -1
    prev_row = np.where(prev_holder >= 0, last[np.maximum(prev_holder, 0)], NONE)
    lead = ib > prev_end
    gaps = [(ig[lead], prev_end[lead], ib[lead], first[lead], prev_row[lead])]
    last_end = np.full(G, lo, np.int64)
    last_row = np.full(G, NONE, np.int64)
    last_idx = np.flatnonzero(np.append(grp_first[1:], True))
    last_end[ig[last_idx]] = np.maximum(run[last_idx], lo)
    h = holder[last_idx]
    last_row[ig[last_idx]] = np.where(h >= 0, last[np.maximum(h, 0)], NONE)
    tail = np.flatnonzero(last_end < hi)
    gaps.append((tail, last_end[tail], np.full(len(tail), hi, np.int64),
                 np.full(len(tail), NONE, np.int64), last_row[tail]))
    gg, gb, ge, gn, gp = (np.concatenate(c) for c in zip(*gaps))
    o = np.lexsort((gb, gg))
    return (ig, ib, ie, first, gg[o], gb[o], ge[o], gn[o], gp[o], lam)


def merge(begin, end, launch, order, starts, lo: int, hi: int,
          engine: str = "auto"):
    """Union of each group's intervals, and the gaps between them.

    Rows are taken in ``order`` (grouped, sorted by begin). Returns
    ``(ig, ib, ie, first, gg, gb, ge, gnext, gprev, lam)``: merged intervals
    (group, begin, end, the row that starts it — of rows starting together,
    the one launched first); gaps (group, begin, end, the row that ends the
    gap or NONE after the last interval, the row whose end began it or NONE
    before the first interval), including the idle stretch from ``lo``
    to a group's first interval and from its last one to ``hi``; and per
    group the smallest observed ``begin − launch`` (floored at 0, NONE when
    no row has a launch time). Touching intervals merge; an interval's end
    is the largest end in it, so a row with end < begin (HTA's rounding
    makes some) cannot extend one.
    """
    args = (readonly(begin), readonly(end), readonly(launch), readonly(order), readonly(starts),
            np.int64(lo), np.int64(hi))
    if resolve_engine(engine, len(order)) == "numba":
        return _merge_nb(*args, False)[:10]
    return _merge_np(*args)


def merge_lean(begin, end, launch, order, starts, lo: int, hi: int,
               engine: str = "auto"):
    """``merge`` without each interval's group and first row: ``(istart,
    ib, ie, gg, gb, ge, gnext, gprev, lam)``, group g's intervals at
    ``istart[g]:istart[g+1]``."""
    args = (readonly(begin), readonly(end), readonly(launch), readonly(order), readonly(starts),
            np.int64(lo), np.int64(hi))
    if resolve_engine(engine, len(order)) == "numba":
        r = _merge_nb(*args, True)
        return (r[10],) + r[1:3] + r[4:10]
    r = _merge_np(*args)
    istart = np.searchsorted(r[0], np.arange(len(starts))).astype(np.int64)
    return (istart,) + r[1:3] + r[4:10]


@njit(cache=True)
def _union_nb(begin, end, order, ident):
    """The union walk over rows order[0], order[1], .. (``ident``: rows
    0, 1, .. and order unused)."""
    n = len(begin) if ident else len(order)
    ub = empty_i64(n)
    ue = empty_i64(n)
    if n == 0:
        return ub, ue
    k = 0
    r = 0 if ident else order[0]
    b, top = begin[r], end[r]
    for j in range(1, n):
        r = j if ident else order[j]
        if begin[r] > top:
            ub[k], ue[k] = b, top
            k += 1
            b, top = begin[r], end[r]
        elif end[r] > top:
            top = end[r]
    ub[k], ue[k] = b, top
    return ub[:k + 1], ue[:k + 1]


def union(begin, end, engine: str = "auto", rows=None) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [begin, end) as sorted disjoint (begin, end)
    (touching intervals join; an interval ends at the largest end in it).
    ``rows``: only those intervals, given in begin order (stable)."""
    begin, end = readonly(begin), readonly(end)
    engine = resolve_engine(engine, len(begin) if rows is None else len(rows))
    if rows is not None:
        rows = readonly(rows)
        if engine == "numba":
            return _union_nb(begin, end, rows, False)
        begin, end = begin[rows], end[rows]
    n = len(begin)
    if engine == "numba":
        if is_sorted_nb(begin):
            return _union_nb(begin, end, begin[:0], True)
        return _union_nb(begin, end, readonly(np.argsort(begin, kind="mergesort")), False)
    order, starts = group_order(np.zeros(n, np.int64), begin, 1, engine)
    r = merge(begin, end, np.full(n, NONE, np.int64), order, starts, 0, 0,
              engine)
    return r[1], r[2]


# -- point lookups and coverage ---------------------------------------------

@njit(cache=True)
def _count_le_nb(a, t):
    out = empty_i64(len(t))
    m = len(a)
    h = 0
    for i in range(len(t)):
        x = t[i]
        if h > 0 and a[h - 1] > x:  # went back in time: search afresh
            h = np.searchsorted(a, x, side="right")
        else:
            steps = 0
            while h < m and a[h] <= x:
                h += 1
                steps += 1
                if steps == 16:  # a long jump: finish by bisection
                    h += np.searchsorted(a[h:], x, side="right")
                    break
        out[i] = h
    return out


def count_le(a, t, engine: str = "auto") -> np.ndarray:
    """For each t, how many of the sorted ``a`` are ≤ t (searchsorted
    right). The Numba version walks forward from the previous answer, so
    mostly increasing queries cost O(1) each."""
    a, t = readonly(a), readonly(t)
    if resolve_engine(engine, len(a) + len(t)) == "numba":
        return _count_le_nb(a, t)
    return np.searchsorted(a, t, side="right").astype(np.int64)


def coverage(seg_begin, seg_end, a, b, engine: str = "auto") -> np.ndarray:
    """How much of each [a, b) the sorted disjoint segments cover (ns)."""
    sb, se = as_i64(seg_begin), as_i64(seg_end)
    a, b = as_i64(a), as_i64(b)
    engine = resolve_engine(engine, len(sb) + len(a))
    if len(sb) == 0:
        return np.zeros(len(a), np.int64)
    before = np.zeros(len(sb) + 1, np.int64)
    np.cumsum(se - sb, out=before[1:])

    def cum(t):
        i = count_le(sb, t, engine)
        j = np.maximum(i - 1, 0)
        c = before[j] + np.minimum(t, se[j]) - sb[j]
        return np.where(i > 0, c, 0)

    return np.maximum(cum(np.maximum(b, a)) - cum(a), 0)

