"""Idle time by cause, per gap and per window, in one pass (see ``gaps.py``
for the rules, numbered there and in the comments here; ``gaps.classify``
is their NumPy statement, ``gap_amounts_nb`` their Numba one).

``attribute`` returns each gap's time by cause and, for each window, each
group's idle time by cause inside it: a gap wholly inside a window adds its
amounts, one sticking out is classified again on the part inside (the
causes are not spread evenly over a gap: sync first, then data/sync/
launch/host, then dependency). The Numba kernel walks the host's data, sync
and launching segments with pointers, as the gaps come in time order, and sums the steps
(sorted, disjoint windows) on the same pass; its NumPy twin computes the
same with ``classify`` and ``searchsorted``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from ...numeric.engines import I64_MAX, as_i64
from ...timeline.schema import NONE
from .activity import HostActivity
from .gaps import classify

__all__ = ["attribute", "Segments", "segments", "gap_amounts_nb", "sync_budget_nb"]

_MAX = I64_MAX


class Segments(NamedTuple):
    """The host's segments as the kernels take them, one argument read by
    name (twelve arrays in a row invite a silent transposition): sorted,
    disjoint [begin, end) ns of each kind (``HostActivity``), with, for the
    kinds the kernels measure coverage of, the time the segments before
    each cover (``*_before``, one longer: 0 first)."""

    data_begin: np.ndarray
    data_end: np.ndarray
    data_before: np.ndarray
    sync_begin: np.ndarray
    sync_end: np.ndarray
    #: per sync segment, the time the host blocked in it and the reads
    #: chained before it (``HostActivity.chain``)
    sync_chain: np.ndarray
    sync_only_begin: np.ndarray
    sync_only_end: np.ndarray
    sync_only_before: np.ndarray
    launch_begin: np.ndarray  # the launch-only segments
    launch_end: np.ndarray
    launch_before: np.ndarray
    slack_ns: np.int64  # ``HostActivity.slack_ns``: a gap this near a sync follows it


@njit(cache=True)
def _count_from(a, t, h):
    """How many of the sorted a are ≤ t, given that at least h are: walks
    on from h (the queries mostly move forward a little), bisecting the
    rest after 16 steps."""
    m = len(a)
    steps = 0
    while h < m and a[h] <= t:
        h += 1
        steps += 1
        if steps == 16:
            return h + np.searchsorted(a[h:], t, side="right")
    return h


@njit(cache=True)
def _covered(b, e, pre, t, c):
    """Time the segments (b, e) cover before t, c of them beginning ≤ t."""
    if c == 0:
        return 0
    return pre[c - 1] + min(t, e[c - 1]) - b[c - 1]


@njit(cache=True)
def gap_amounts_nb(g0, g1, launch, has_next, after, lam, qa, qb, i, j, jo, jl, seg):
    """(data, sync, launch, host, dependency, unknown) ns of [qa, qb) of the
    gap [g0, g1); i, j, jo, jl: how many data, sync, sync-only and
    launch-only segments begin ≤ g0; seg: the host's ``Segments``."""
    db, de, dpre = seg.data_begin, seg.data_end, seg.data_before
    se = seg.sync_end
    ob, oe, opre = seg.sync_only_begin, seg.sync_only_end, seg.sync_only_before
    lb, le, lpre = seg.launch_begin, seg.launch_end, seg.launch_before
    slack = seg.slack_ns
    qa = max(qa, g0)
    qb = max(min(qb, g1), qa)
    if has_next and launch == NONE:  # rule 1
        return 0, 0, 0, 0, 0, qb - qa
    # the host part [g0, h), rule 2 taking the rest; rule 3 up to the cut
    if not has_next:
        h = g1
    elif launch <= g0:
        h = g0
    else:
        h = min(launch + max(lam, 0), g1)
    near = after or (j > 0 and g0 <= se[j - 1] + slack)
    in_data = i > 0 and g0 < de[i - 1]
    nxt_d = db[i] if i < len(db) else _MAX
    cut = min(nxt_d, h, sync_budget_nb(g0, launch, j, jl, seg)) \
        if near and not in_data else g0
    hb = min(qb, h)
    sync = max(min(cut, hb) - qa, 0)  # rule 3
    ra = max(qa, cut)  # rules 4 to 8 split [ra, rb)
    rb = max(hb, ra)
    data = so = la = 0
    if rb > ra:
        # most host time is outside data and syncs: when [ra, rb) lies
        # between two segments (ra ≥ g0, known outside), it needs no walk
        if in_data or rb > nxt_d:  # rule 4
            ca = _count_from(db, ra, i)
            data = _covered(db, de, dpre, rb, _count_from(db, rb, ca)) - \
                _covered(db, de, dpre, ra, ca)
        nxt_o = ob[jo] if jo < len(ob) else _MAX
        if (jo > 0 and g0 < oe[jo - 1]) or rb > nxt_o:  # rule 5
            ca = _count_from(ob, ra, jo)
            so = _covered(ob, oe, opre, rb, _count_from(ob, rb, ca)) - \
                _covered(ob, oe, opre, ra, ca)
        la = _launched(lb, le, lpre, ra, rb, jl)  # rule 6
        t = max(ra, launch) if has_next else rb
        if rb - ra - data - so - la > 0 and t < rb:  # rule 7: the launch's own latency
            tail = rb - t - _launched(lb, le, lpre, t, rb, jl)
            if data > 0:
                tail -= _cov(db, de, dpre, t, rb, i)
            if so > 0:
                tail -= _cov(ob, oe, opre, t, rb, jo)
            la += tail
    # rule 8 the rest of the host part, rule 2 the gap outside it
    return data, sync + so, la, rb - ra - data - so - la, max(qb - max(qa, h), 0), 0


@njit(cache=True)
def sync_budget_nb(g0, launch, j, jl, seg):
    """Where a post-sync gap's sync part ends at the latest (``gaps.py``):
    nowhere while the host dispatched on from the sync (j sync segments
    begin ≤ g0) to the next launch; else g0 plus the time the host blocked
    in it and in the reads chained before it (``Segments.sync_chain``), or
    the end of its dispatching if later (jl launch-only segments ≤ g0)."""
    if j == 0:
        return _MAX
    se, sc, lb, le = seg.sync_end, seg.sync_chain, seg.launch_begin, seg.launch_end
    t = max(g0, se[j - 1])
    c = _count_from(lb, t, jl)
    run = le[c - 1] if c > 0 and t < le[c - 1] else t
    return _MAX if run >= launch else max(g0 + sc[j - 1], run)


@njit(cache=True)
def _cov(b, e, pre, a, z, h):
    """Time the segments cover in [a, z), h of them beginning ≤ a at least."""
    ca = _count_from(b, a, h)
    return _covered(b, e, pre, z, _count_from(b, z, ca)) - _covered(b, e, pre, a, ca)


@njit(cache=True)
def _launched(lb, le, lpre, ra, rb, jl):
    """Time the launching segments cover in [ra, rb), jl of them beginning
    ≤ ra at least; mostly [ra, rb) lies inside one segment."""
    ca = _count_from(lb, ra, jl)
    if ca > 0 and rb <= le[ca - 1]:
        return rb - ra
    return _covered(lb, le, lpre, rb, _count_from(lb, rb, ca)) - \
        _covered(lb, le, lpre, ra, ca)


@njit(cache=True)
def _part(acc, w, a, b, g0, g1, launch, has_next, after, lam, i, j, jo, jl, seg):
    """Add the part inside window w, [a, b), of the gap [g0, g1) that
    sticks out of it to acc[w]."""
    c = gap_amounts_nb(g0, g1, launch, has_next, after, lam, a, b, i, j, jo, jl, seg)
    for x in range(6):
        acc[w, x] += c[x]


@njit(cache=True)
def _attribute_nb(gb, ge, nl, has_next, after, lam, gstart, w0, w1, steps, keep, seg):
    """One pass over each group's gaps (time-sorted): their amounts, and,
    when ``steps`` (windows 1.. sorted and disjoint), the windows' sums on
    the way; otherwise the windows are summed in a second pass. The common
    case is written out here, not called (a call per gap costs more than
    the arithmetic); a gap that meets a data or sync segment, or sticks
    out of a window, goes through ``gap_amounts_nb``."""
    db, de = seg.data_begin, seg.data_end
    sb, se = seg.sync_begin, seg.sync_end
    ob, oe = seg.sync_only_begin, seg.sync_only_end
    lb, le, lpre = seg.launch_begin, seg.launch_end, seg.launch_before
    slack = seg.slack_ns
    n, G, W = len(gb), len(gstart) - 1, len(w0)
    nd, ns, no, nla = len(db), len(sb), len(ob), len(lb)
    amounts = np.empty((n if keep else 0, 6), np.int64)  # keep: the per-gap table too
    windows = np.zeros((G, W, 6), np.int64)
    a_0, b_0 = w0[0], w1[0]
    for g in range(G):
        i = j = jo = jl = 0  # data, sync, sync-only, launch segments beginning ≤ g0
        kw = 1  # the first step window that ends after the gap begins
        acc = windows[g]
        for k in range(gstart[g], gstart[g + 1]):
            g0, g1, launch, nxt, lk = gb[k], ge[k], nl[k], has_next[k], lam[k]
            while i < nd and db[i] <= g0:
                i += 1
            while j < ns and sb[j] <= g0:
                j += 1
            while jo < no and ob[jo] <= g0:
                jo += 1
            while jl < nla and lb[jl] <= g0:
                jl += 1
            a0 = a1 = a2 = a3 = a4 = a5 = 0
            if nxt and launch == NONE:  # rule 1
                a5 = g1 - g0
            else:
                # rules 2 and 3 as in gap_amounts_nb, written out: a shared
                # function for them (plain or inline="always") made this kernel
                # and overlap._pieces_nb 1.5-3x slower (10^6 rows, 4 streams)
                h = g1 if not nxt else (g0 if launch <= g0 else min(launch + max(lk, 0), g1))
                near = after[k] or (j > 0 and g0 <= se[j - 1] + slack)
                in_data = i > 0 and g0 < de[i - 1]
                nxt_d = db[i] if i < nd else _MAX
                cut = min(nxt_d, h, sync_budget_nb(g0, launch, j, jl, seg)) \
                    if near and not in_data else g0
                ra = cut
                rb = max(h, ra)
                a4 = g1 - h  # rule 2
                nxt_o = ob[jo] if jo < no else _MAX
                if rb > ra and (in_data or rb > nxt_d or (jo > 0 and g0 < oe[jo - 1])
                                or rb > nxt_o):
                    a0, a1, a2, a3, a4, a5 = gap_amounts_nb(
                        g0, g1, launch, nxt, after[k], lk, g0, g1, i, j, jo, jl, seg)
                else:  # no data or sync meets the host part (rules 4, 5): sync up
                    a1 = min(cut, h) - g0  # to the cut (3), then launch (6, 7) or host (8)
                    if rb > ra:
                        a2 = _launched(lb, le, lpre, ra, rb, jl)
                        t = max(ra, launch) if nxt else rb
                        if a2 < rb - ra and t < rb:  # the launch's own latency
                            a2 += rb - t - _launched(lb, le, lpre, t, rb, jl)
                        a3 = rb - ra - a2
            if keep:
                amounts[k, 0], amounts[k, 1], amounts[k, 2] = a0, a1, a2
                amounts[k, 3], amounts[k, 4], amounts[k, 5] = a3, a4, a5
            if not steps:
                continue
            w, a, b = 0, a_0, b_0  # window 0, then the steps the gap meets
            while True:
                if a <= g0 and g1 <= b:
                    acc[w, 0] += a0
                    acc[w, 1] += a1
                    acc[w, 2] += a2
                    acc[w, 3] += a3
                    acc[w, 4] += a4
                    acc[w, 5] += a5
                elif b > g0 and a < g1:
                    _part(acc, w, a, b, g0, g1, launch, nxt, after[k], lk, i, j, jo, jl, seg)
                if w == 0:
                    while kw < W and w1[kw] <= g0:
                        kw += 1
                    w = kw
                else:
                    w += 1
                if w >= W or w0[w] >= g1:
                    break
                a, b = w0[w], w1[w]
    if steps:
        return amounts, windows
    order = np.argsort(w0, kind="mergesort")
    for g in range(G):
        p = gstart[g]
        end = gstart[g + 1]
        for w in order:  # windows by begin: the first gap to look at only moves on
            a, b = w0[w], w1[w]
            while p < end and ge[p] <= a:
                p += 1
            q = p
            acc = windows[g, w]
            while q < end and gb[q] < b:
                if gb[q] >= a and ge[q] <= b:
                    for c in range(6):
                        acc[c] += amounts[q, c]
                else:
                    g0 = gb[q]
                    c = gap_amounts_nb(g0, ge[q], nl[q], has_next[q], after[q], lam[q], a, b,
                                 np.searchsorted(db, g0, side="right"),
                                 np.searchsorted(sb, g0, side="right"),
                                 np.searchsorted(ob, g0, side="right"),
                                 np.searchsorted(lb, g0, side="right"), seg)
                    for x in range(6):
                        acc[x] += c[x]
                q += 1
    return amounts, windows


def _attribute_np(gb, ge, nl, has_next, after, lam, gstart, w0, w1, act):
    amounts = classify(gb, ge, nl, has_next, lam, act, engine="numpy", after_sync=after)
    G, W = len(gstart) - 1, len(w0)
    windows = np.zeros((G, W, 6), np.int64)
    for g in range(G):
        s, e = gstart[g], gstart[g + 1]
        if e == s:
            continue
        before = np.zeros((e - s + 1, 6), np.int64)
        np.cumsum(amounts[s:e], axis=0, out=before[1:])
        a = np.searchsorted(ge[s:e], w0, side="right")  # first gap ending after w0
        b = np.maximum(np.searchsorted(gb[s:e], w1, side="left"), a)
        windows[g] = before[b] - before[a]
        for j, distinct in ((a, True), (b - 1, b - 1 > a)):
            jj = np.minimum(j, e - s - 1)
            out = (b > a) & distinct & ((gb[s + jj] < w0) | (ge[s + jj] > w1))
            w = np.flatnonzero(out)
            if len(w):
                r = s + jj[w]
                windows[g, w] += classify(gb[r], ge[r], nl[r], has_next[r], lam[r],
                                          act, w0[w], w1[w], engine="numpy",
                                          after_sync=after[r]) - amounts[r]
    return amounts, windows


def attribute(gb, ge, nl, has_next, lam, gstart, act: HostActivity, w0, w1,
              engine: str = "numba", after_sync=None,
              amounts: bool = True) -> tuple[np.ndarray | None, np.ndarray]:
    """((gaps, 6) ns by Cause, (groups, windows, 6) ns by Cause).

    Gaps are grouped (``gstart``) and time-sorted within a group; ``nl``
    is the launch time of the row ending each gap, ``has_next`` False for
    a tail gap, ``lam`` the latency of each gap's group, ``after_sync``
    True for gaps right after a sync op's own work (see ``gaps.classify``);
    windows are [w0, w1) in any order. ``amounts=False``: the per-gap table
    may be left out (None), which spares the kernel writing it.
    """
    i64 = as_i64
    gb, ge, nl, lam, gstart = (i64(x) for x in (gb, ge, nl, lam, gstart))
    has_next = np.ascontiguousarray(has_next, bool)
    after = np.zeros(len(gb), bool) if after_sync is None else \
        np.ascontiguousarray(after_sync, bool)
    w0, w1 = i64(np.atleast_1d(w0)), i64(np.atleast_1d(w1))
    w1 = np.maximum(w1, w0)
    if engine == "numpy":
        return _attribute_np(gb, ge, nl, has_next, after, lam, gstart, w0, w1, act)
    steps = bool(np.all(w0[2:] >= w1[1:-1]))  # windows 1.. sorted, disjoint
    keep = amounts or not steps  # the second pass over windows reads them
    out = _attribute_nb(gb, ge, nl, has_next, after, lam, gstart, w0, w1, steps, keep,
                        segments(act))
    return out if amounts else (None, out[1])


def segments(act: HostActivity) -> Segments:
    """The host's segments as the kernels read them (``Segments``)."""
    i64 = as_i64
    (db, de), (sb, se), (ob, oe) = act.data, act.sync, act.sync_only
    lb, le = act.launch_only
    pre = [np.concatenate([[0], np.cumsum(e - b)]).astype(np.int64)
           for b, e in (act.data, act.sync_only, act.launch_only)]
    return Segments(i64(db), i64(de), pre[0], i64(sb), i64(se), i64(act.chain()),
                    i64(ob), i64(oe), pre[1], i64(lb), i64(le), pre[2],
                    np.int64(act.slack_ns))
