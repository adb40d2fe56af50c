"""Sorted runs: merging groups' sorted runs into one sequence (a device's
rows from its streams'), and gathering a column grouped and sorted.

Each kernel has a NumPy twin (``engine="numpy"``) that gives equal
results; conventions as in ``intervals.py`` (int64 ns, rows grouped by
``order``/``starts``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .engines import as_i64, readonly, empty_i64, resolve_engine
from .ordering import is_sorted_nb, is_sorted

__all__ = ["merge_runs", "merge_rows", "runs_sorted", "merge_values", "gather_sorted"]


@njit(cache=True)
def _merge4(v, tie, P, hb, he, out, at, values=False):
    """Merge the (up to) four runs P[hb[q]:he[q]] of positions into v
    (``P`` None: the positions hb[q]..he[q] themselves) by (v, tie)
    (``tie`` None: by position) into out[at:] (``values``: their values,
    not positions): a tournament of selects per
    row, not branches (which run is next is unpredictable), written out
    (a call per row costs more than the comparisons). Full ties: the
    earlier run."""
    h0, h1, h2, h3 = hb[0], hb[1], hb[2], hb[3]
    e0, e1, e2, e3 = he[0], he[1], he[2], he[3]
    for o in range(at, at + (e0 - h0) + (e1 - h1) + (e2 - h2) + (e3 - h3)):
        x0, x1, x2, x3 = h0 >= e0, h1 >= e1, h2 >= e2, h3 >= e3  # run used up
        if P is None:
            p0, p1, p2, p3 = h0, h1, h2, h3
        else:
            p0 = P[h0] if not x0 else 0
            p1 = P[h1] if not x1 else 0
            p2 = P[h2] if not x2 else 0
            p3 = P[h3] if not x3 else 0
        k0 = v[p0] if not x0 else 0
        k1 = v[p1] if not x1 else 0
        k2 = v[p2] if not x2 else 0
        k3 = v[p3] if not x3 else 0
        if tie is None:
            t0, t1, t2, t3 = p0, p1, p2, p3
        else:
            t0 = tie[p0] if not x0 else 0
            t1 = tie[p1] if not x1 else 0
            t2 = tie[p2] if not x2 else 0
            t3 = tie[p3] if not x3 else 0
        a = x1 | (~x0 & ((k0 < k1) | ((k0 == k1) & (t0 <= t1))))
        ka = k0 if a else k1
        ta = t0 if a else t1
        pa = p0 if a else p1
        xa = x0 & x1
        c2 = x3 | (~x2 & ((k2 < k3) | ((k2 == k3) & (t2 <= t3))))
        kb = k2 if c2 else k3
        tb = t2 if c2 else t3
        pb = p2 if c2 else p3
        xb = x2 & x3
        c = xb | (~xa & ((ka < kb) | ((ka == kb) & (ta <= tb))))
        if values:
            out[o] = ka if c else kb
        else:
            out[o] = pa if c else pb
        h0 += a & c
        h1 += ~a & c
        h2 += c2 & ~c
        h3 += ~c2 & ~c


@njit(cache=True)
def _kway_nb(v, tie, starts, members, rows=None):
    """Positions of the runs merged (``rows``: the runs are rows[starts[m]:
    starts[m+1]] of positions into v, and those come back), four at a
    time, level by level (log4 k passes; the first reads the runs in
    place: fresh memory costs more here than the comparisons)."""
    k = len(members)
    total = 0
    for a in range(k):
        total += starts[members[a] + 1] - starts[members[a]]
    out = empty_i64(total)
    hb, he = np.zeros(4, np.int64), np.zeros(4, np.int64)
    bounds = np.zeros((k + 3) // 4 + 1, np.int64)
    for r in range(0, k, 4):
        hb[:], he[:] = 0, 0
        for q in range(min(4, k - r)):
            hb[q], he[q] = starts[members[r + q]], starts[members[r + q] + 1]
        _merge4(v, tie, rows, hb, he, out, bounds[r // 4])
        bounds[r // 4 + 1] = bounds[r // 4] + np.sum(he - hb)
    k = (k + 3) // 4
    if k <= 1:
        return out
    P, P2 = out, empty_i64(total)
    while k > 1:
        nb = np.zeros((k + 3) // 4 + 1, np.int64)
        for r in range(0, k, 4):
            for q in range(4):
                hb[q], he[q] = bounds[min(r + q, k)], bounds[min(r + q + 1, k)]
            _merge4(v, tie, P, hb, he, P2, bounds[r])
            nb[r // 4 + 1] = bounds[min(r + 4, k)]
        k = (k + 3) // 4
        bounds = nb
        P, P2 = P2, P
    return P


@njit(cache=True)
def _kway_values_nb(v, starts, members):
    """``v[_kway_nb(v, None, starts, members)]``: each level merges the
    values themselves (no positions, no gather)."""
    k = len(members)
    total = 0
    for a in range(k):
        total += starts[members[a] + 1] - starts[members[a]]
    out = empty_i64(total)
    hb, he = np.zeros(4, np.int64), np.zeros(4, np.int64)
    bounds = np.zeros((k + 3) // 4 + 1, np.int64)
    for r in range(0, k, 4):
        hb[:], he[:] = 0, 0
        for q in range(min(4, k - r)):
            hb[q], he[q] = starts[members[r + q]], starts[members[r + q] + 1]
        _merge4(v, None, None, hb, he, out, bounds[r // 4], True)
        bounds[r // 4 + 1] = bounds[r // 4] + np.sum(he - hb)
    k = (k + 3) // 4
    if k <= 1:
        return out
    V, V2 = out, empty_i64(total)
    while k > 1:
        nb = np.zeros((k + 3) // 4 + 1, np.int64)
        for r in range(0, k, 4):
            for q in range(4):
                hb[q], he[q] = bounds[min(r + q, k)], bounds[min(r + q + 1, k)]
            _merge4(V, None, None, hb, he, V2, bounds[r], True)
            nb[r // 4 + 1] = bounds[min(r + 4, k)]
        k = (k + 3) // 4
        bounds = nb
        V, V2 = V2, V
    return V


@njit(cache=True)
def _runs_sorted_nb(v, rows, starts, members):
    for m in members:
        for x in range(starts[m] + 1, starts[m + 1]):
            if v[rows[x]] < v[rows[x - 1]]:
                return False
    return True


def _kway_np(v, tie, starts, members):
    pos = np.concatenate([np.arange(starts[m], starts[m + 1]) for m in members]) \
        if len(members) else np.zeros(0, np.int64)
    return pos[np.lexsort((pos if tie is None else tie[pos], v[pos]))].astype(np.int64)


def merge_runs(v, tie, starts, members, engine: str = "auto") -> np.ndarray:
    """Positions into ``v`` that visit the sorted runs ``v[starts[m]:
    starts[m+1]]`` (m in ``members``) in one sorted sequence, ties by
    ``tie`` (e.g. row numbers, for a stable merge)."""
    v, tie, starts, members = readonly(v), readonly(tie), readonly(starts), readonly(members)
    if resolve_engine(engine, len(v)) == "numba":
        return _kway_nb(v, tie, starts, members, None)
    return _kway_np(v, tie, starts, members)


def merge_rows(v, rows, starts, members, engine: str = "auto") -> np.ndarray:
    """The rows of the runs ``rows[starts[m]:starts[m+1]]`` (m in
    ``members``), each sorted by ``v[row]``, in one sequence sorted by
    (``v[row]``, row): ``rows[merge_runs(v[rows], rows, ...)]`` without
    the copies."""
    v, rows, starts, members = readonly(v), readonly(rows), readonly(starts), readonly(members)
    if resolve_engine(engine, len(rows)) == "numba":
        return _kway_nb(v, None, starts, members, rows)
    return rows[_kway_np(v[rows], rows, starts, members)]


def runs_sorted(v, rows, starts, members, engine: str = "auto") -> bool:
    """Whether each run ``rows[starts[m]:starts[m+1]]`` (m in ``members``)
    is sorted by ``v[row]``."""
    v, rows, starts, members = readonly(v), readonly(rows), readonly(starts), readonly(members)
    if resolve_engine(engine, len(rows)) == "numba":
        return bool(_runs_sorted_nb(v, rows, starts, members))
    return all(is_sorted(v[rows[starts[m]:starts[m + 1]]], "numpy") for m in members)


def merge_values(v, starts, members, engine: str = "auto") -> np.ndarray:
    """The values of the sorted runs ``v[starts[m]:starts[m+1]]`` (m in
    ``members``) in one sorted sequence."""
    v, starts, members = readonly(v), readonly(starts), readonly(members)
    if resolve_engine(engine, len(v)) == "numba":
        return _kway_values_nb(v, starts, members)
    return v[_kway_np(v, None, starts, members)]


@njit(cache=True)
def _is_identity(order):
    """Whether order is 0, 1, 2, ..: blocks compared without a branch
    (vectorised; a branch per row is 5x slower)."""
    n = len(order)
    for a in range(0, n, 4096):
        q = order[a:min(a + 4096, n)]
        bad = False
        for i in range(len(q)):
            bad |= q[i] != a + i
        if bad:
            return False
    return True


@njit(cache=True)
def _gather_sorted_nb(x, order, starts):
    """x[order] with each group's slice sorted; x itself when order is the
    identity and x is sorted."""
    n = len(order)
    if len(x) == n and _is_identity(order) and is_sorted_nb(x):
        return x
    out = empty_i64(n)
    for k in range(n):
        out[k] = x[order[k]]
    for g in range(len(starts) - 1):
        s, e = starts[g], starts[g + 1]
        for k in range(s + 1, e):
            if out[k] < out[k - 1]:
                out[s:e] = np.sort(out[s:e])
                break
    return out


def gather_sorted(x, order, starts, engine: str = "auto") -> np.ndarray:
    """x[order] with each group's slice (``starts``) sorted."""
    x, order, starts = as_i64(x), as_i64(order), as_i64(starts)
    if resolve_engine(engine, len(order)) == "numba":
        return _gather_sorted_nb(x, order, starts)
    out = x[order]
    for g in range(len(starts) - 1):
        out[starts[g]:starts[g + 1]] = np.sort(out[starts[g]:starts[g + 1]])
    return out
