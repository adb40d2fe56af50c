"""Idle time by cause, per gap and per window, in one pass (see ``gaps.py``
for the rules; ``gaps.classify`` is their NumPy statement).

``attribute`` returns each gap's time by cause and, for each window, each
group's idle time by cause inside it: a gap wholly inside a window adds its
amounts, one sticking out is classified again on the part inside (the
causes are not spread evenly over a gap: sync first, then data/sync/
dispatch, then dependency). The Numba kernel walks the host's data and sync
segments with pointers, as the gaps come in time order; its NumPy twin
computes the same with ``classify`` and ``searchsorted``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import intervals as iv
from .gaps import HostActivity, classify
from .timeline import NONE

__all__ = ["attribute"]

_MAX = iv.I64_MAX


@njit(cache=True)
def _seek(a, t, h):
    """How many of the sorted a are ≤ t, walking from the previous answer."""
    m = len(a)
    if h > 0 and a[h - 1] > t:
        return np.searchsorted(a, t, side="right")
    steps = 0
    while h < m and a[h] <= t:
        h += 1
        steps += 1
        if steps == 16:
            return h + np.searchsorted(a[h:], t, side="right")
    return h


@njit(cache=True)
def _cover(b, e, before, t, hints, k):
    """Time the segments (b, e) cover before t; hints[k] keeps the walk."""
    i = _seek(b, t, hints[k])
    hints[k] = i
    if i == 0:
        return 0
    return before[i - 1] + min(t, e[i - 1]) - b[i - 1]


@njit(cache=True)
def _one(out, g0, g1, launch, has_next, after, lam, qa, qb, db, de, dpre, sb,
         se, ob, oe, opre, slack, hints):
    """Amounts of [qa, qb) of gap [g0, g1) into out[0:5] (added)."""
    qa = max(qa, g0)
    qb = max(min(qb, g1), qa)
    if has_next and launch == NONE:
        out[4] += qb - qa
        return
    if not has_next:
        h = g1
    elif launch <= g0:
        h = g0
    else:
        h = min(launch + max(lam, 0), g1)
    cut = g0
    j = _seek(sb, g0, hints[0])
    hints[0] = j
    near = after or (j > 0 and g0 <= se[j - 1] + slack)
    i = _seek(db, g0, hints[1])
    hints[1] = i
    in_data = i > 0 and g0 < de[i - 1]
    if near and not in_data:
        nxt = db[i] if i < len(db) else _MAX
        cut = min(nxt, h)
    hb = min(qb, h)
    sync = max(min(cut, hb) - qa, 0)
    ra = max(qa, cut)
    rb = max(hb, ra)
    data = so = 0
    if rb > ra:
        # most host time is plain dispatch: when [ra, rb) lies between two
        # segments (ra ≥ g0, known outside), it needs no coverage walk
        nxt_d = db[i] if i < len(db) else _MAX
        if in_data or rb > nxt_d:
            data = _cover(db, de, dpre, rb, hints, 2) - _cover(db, de, dpre, ra, hints, 3)
        jo = _seek(ob, g0, hints[6])
        hints[6] = jo
        nxt_o = ob[jo] if jo < len(ob) else _MAX
        if (jo > 0 and g0 < oe[jo - 1]) or rb > nxt_o:
            so = _cover(ob, oe, opre, rb, hints, 4) - _cover(ob, oe, opre, ra, hints, 5)
    out[0] += data
    out[1] += sync + so
    out[2] += rb - ra - data - so
    out[3] += max(qb - max(qa, h), 0)


@njit(cache=True)
def _attribute_nb(gb, ge, nl, has_next, after, lam, gstart, w0, w1, db, de,
                  dpre, sb, se, ob, oe, opre, slack):
    n, G, W = len(gb), len(gstart) - 1, len(w0)
    amounts = np.zeros((n, 5), np.int64)
    windows = np.zeros((G, W, 5), np.int64)
    hints = np.zeros(7, np.int64)
    for k in range(n):
        _one(amounts[k], gb[k], ge[k], nl[k], has_next[k], after[k], lam[k], gb[k],
             ge[k], db, de, dpre, sb, se, ob, oe, opre, slack, hints)
    order = np.argsort(w0, kind="mergesort")
    for g in range(G):
        p = gstart[g]
        end = gstart[g + 1]
        for w in order:  # windows by begin: the first gap to look at only moves on
            a, b = w0[w], w1[w]
            while p < end and ge[p] <= a:
                p += 1
            j = p
            acc = windows[g, w]
            while j < end and gb[j] < b:
                if gb[j] >= a and ge[j] <= b:
                    for c in range(5):
                        acc[c] += amounts[j, c]
                else:
                    _one(acc, gb[j], ge[j], nl[j], has_next[j], after[j], lam[j],
                         a, b, db, de, dpre, sb, se, ob, oe, opre, slack, hints)
                j += 1
    return amounts, windows


def _attribute_np(gb, ge, nl, has_next, after, lam, gstart, w0, w1, act):
    amounts = classify(gb, ge, nl, has_next, lam, act, engine="numpy", after_sync=after)
    G, W = len(gstart) - 1, len(w0)
    windows = np.zeros((G, W, 5), np.int64)
    for g in range(G):
        s, e = gstart[g], gstart[g + 1]
        if e == s:
            continue
        before = np.zeros((e - s + 1, 5), np.int64)
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
              engine: str = "numba", after_sync=None) -> tuple[np.ndarray, np.ndarray]:
    """((gaps, 5) ns by Cause, (groups, windows, 5) ns by Cause).

    Gaps are grouped (``gstart``) and time-sorted within a group; ``nl``
    is the launch time of the row ending each gap, ``has_next`` False for
    a tail gap, ``lam`` the latency of each gap's group, ``after_sync``
    True for gaps right after a sync op's own work (see ``gaps.classify``);
    windows are [w0, w1) in any order.
    """
    i64 = iv._i64
    gb, ge, nl, lam, gstart = (i64(x) for x in (gb, ge, nl, lam, gstart))
    has_next = np.ascontiguousarray(has_next, bool)
    after = np.zeros(len(gb), bool) if after_sync is None else \
        np.ascontiguousarray(after_sync, bool)
    w0, w1 = i64(np.atleast_1d(w0)), i64(np.atleast_1d(w1))
    w1 = np.maximum(w1, w0)
    if engine == "numpy":
        return _attribute_np(gb, ge, nl, has_next, after, lam, gstart, w0, w1, act)
    (db, de), (sb, se), (ob, oe) = act.data, act.sync, act.sync_only
    pre = [np.concatenate([[0], np.cumsum(e - b)]).astype(np.int64)
           for b, e in (act.data, act.sync_only)]
    return _attribute_nb(gb, ge, nl, has_next, after, lam, gstart, w0, w1, i64(db), i64(de),
                         pre[0], i64(sb), i64(se), i64(ob), i64(oe), pre[1],
                         np.int64(act.slack_ns))
