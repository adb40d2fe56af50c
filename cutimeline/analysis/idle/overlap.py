"""Stream idle time that other streams of the device filled: no cause.

A stream's gap is idle time of that stream alone. Where another stream of
the same device ran, the device was busy and the GPU waited for nothing,
so that part of the gap adds to no cause: a prefetch stream idle 90 % of a
step beside a busy compute stream is not 90 % launch or host time. The
verdicts and totals use device gaps (idle when none of a device's streams
runs). For the per-stream tables a stream gap is cut to the device gaps
inside it (each device gap lies inside one gap of each of the device's
streams), each piece classified with the stream gap's own rules
(``gaps.classify``, clipped), and the rest of the gap is *overlapped*.

With ``engine="numba"`` one kernel cuts and classifies (``_pieces_nb``,
with ``attribution.gap_amounts_nb``, the Numba statement of ``classify``,
whose rule numbers its comments cite): a
stream's gaps come in time order, so the device gaps and the host's
segments are found by pointers that walk on, and ``stream_window`` sums
per stream on the way instead of writing a row per gap; the NumPy twin
cuts with ``searchsorted`` and classifies with ``classify``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...numeric.engines import as_i64
from ...timeline.schema import NONE
from .activity import HostActivity
from .attribution import gap_amounts_nb, segments, sync_budget_nb
from .gaps import classify
from .lanes import Lanes

__all__ = ["device_idle_amounts", "stream_window", "PIECES_PER_BATCH"]

#: pieces (a stream gap cut at the device's gaps) the NumPy twin classifies
#: at once: ~40 arrays of this many int64s, ~80 MB, whatever the count
PIECES_PER_BATCH = 1 << 18


def device_idle_amounts(ln: Lanes, act: HostActivity, k, qa=None, qb=None,
                        engine: str = "numba") -> tuple[np.ndarray, np.ndarray]:
    """((n, 6) ns by Cause, (n,) overlapped ns) of the stream gaps ``k``
    (indices into ``ln.streams``' gaps), each clipped to [qa, qb) (default
    the whole gap): the causes over the part where the device was idle
    too, and the time another stream of the device was busy."""
    st, dv = ln.streams, ln.devices
    k = np.asarray(k, np.int64)
    g0, g1 = st.gb[k], st.ge[k]
    qa = g0 if qa is None else np.maximum(np.asarray(qa, np.int64), g0)
    qb = g1 if qb is None else np.minimum(np.asarray(qb, np.int64), g1)
    qb = np.maximum(qb, qa)
    n = len(k)
    if engine == "numba":
        return _pieces(ln, act, k, qa, qb, np.arange(n, dtype=np.int64), n)
    args = (g0, g1, st.nl[k], st.gnext[k] != NONE, st.lam[st.gg[k]])
    if dv is st:  # one stream per device: its gaps are the device's
        am = classify(*args, act, qa, qb, engine, after_sync=st.after[k])
        return am, np.zeros(n, np.int64)
    dev = ln.stream_device[st.gg[k]]
    lo, hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for d in np.unique(dev):  # the device gaps meeting each [qa, qb)
        m = dev == d
        s, e = dv.gstart[d], dv.gstart[d + 1]
        lo[m] = s + np.searchsorted(dv.ge[s:e], qa[m], side="right")
        hi[m] = s + np.searchsorted(dv.gb[s:e], qb[m], side="left")
    cnt = np.maximum(hi - lo, 0)
    out = np.zeros((n, 6), np.int64)
    # a gap spans as many device gaps as the other streams' work cuts it
    # into: with many sparse streams pieces grow as streams × rows, so they
    # are classified a batch of PIECES_PER_BATCH at a time (memory linear)
    cum = np.cumsum(cnt)
    a = 0
    while a < n:
        done = int(cum[a - 1]) if a else 0
        b = max(int(np.searchsorted(cum, done + PIECES_PER_BATCH, side="right")), a + 1)
        c = cnt[a:b]
        rep = a + np.repeat(np.arange(b - a), c)
        piece = np.repeat(lo[a:b] - np.cumsum(c) + c, c) + np.arange(int(c.sum()))
        pa = np.maximum(dv.gb[piece], qa[rep])
        pb = np.minimum(dv.ge[piece], qb[rep])
        am = classify(*(x[rep] for x in args), act, pa, pb, engine,
                      after_sync=st.after[k][rep])
        out[a:b] = _sums(am, c)
        a = b
    return out, (qb - qa) - out.sum(axis=1)


def _sums(x: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """Row sums of x over consecutive runs of cnt[i] rows (0 for none):
    reduceat over the runs' starts, exact in int64 (np.add.at is slower)."""
    out = np.zeros((len(cnt),) + x.shape[1:], x.dtype)
    has = cnt > 0
    if has.any():
        out[has] = np.add.reduceat(x, (np.cumsum(cnt) - cnt)[has], axis=0)
    return out


def stream_window(ln: Lanes, act: HostActivity, w0: int, w1: int,
                  engine: str = "numba") -> tuple[np.ndarray, np.ndarray]:
    """((streams, 6) ns by Cause, (streams,) overlapped ns) of each
    stream's idle time inside [w0, w1)."""
    st = ln.streams
    if engine == "numba":  # all gaps (those outside the window add nothing)
        k = np.arange(len(st.gb), dtype=np.int64)
        return _pieces(ln, act, k, np.array([w0], np.int64), np.array([w1], np.int64),
                       st.gg, st.n)
    sel = np.flatnonzero((st.ge > w0) & (st.gb < w1))
    am, ov = device_idle_amounts(ln, act, sel, np.full(len(sel), w0),
                                 np.full(len(sel), w1), engine)
    cnt = np.bincount(st.gg[sel], minlength=st.n)  # gaps come grouped by stream
    return _sums(am, cnt), _sums(ov, cnt)


def _pieces(ln: Lanes, act: HostActivity, k, qa, qb, row, n_out: int):
    """``device_idle_amounts`` of the stream gaps ``k`` clipped to [qa, qb)
    (arrays, or one bound for all), summed into the rows ``row`` of the
    (n_out, 6) and (n_out,) results, by ``_pieces_nb``."""
    st, dv = ln.streams, ln.devices
    dev = ln.stream_device if dv is not st else np.arange(st.n, dtype=np.int64)
    i64 = as_i64
    return _pieces_nb(i64(k), i64(qa), i64(qb), i64(row), int(n_out), i64(st.gb),
                      i64(st.ge), i64(st.nl), i64(st.gnext),
                      np.ascontiguousarray(st.after, np.bool_), i64(st.lam), i64(st.gg),
                      i64(dev), i64(dv.gb), i64(dv.ge), i64(dv.gstart), segments(act))


@njit(cache=True)
def _pieces_nb(k, qa, qb, row, n_out, gb, ge, nl, gnext, after, lam, gg, dev, dgb, dge,
               dgs, seg):
    """Per stream gap k[x], clipped to [qa[x], qb[x]) (one bound: for all):
    the device gaps inside, each classified with the stream gap's rules
    and added to out[row[x]]; the rest of the clipped gap to over[row[x]].
    Pointers into the device gaps and the host's segments walk on while
    the gaps come in time order (a gap earlier than the last: bisection).
    The common case is written out (as in ``attribution._attribute_nb``:
    a call per piece, its arrays' reference counts, costs more than the
    arithmetic): the gap's host part [cut, h) meets no data or sync
    segment and lies inside one launching segment (all launch) or between
    two (host, less the launch's own latency); other gaps' pieces go
    through ``gap_amounts_nb``. seg: the host's ``attribution.Segments``."""
    db, de = seg.data_begin, seg.data_end
    sb, se = seg.sync_begin, seg.sync_end
    ob, oe = seg.sync_only_begin, seg.sync_only_end
    lb, le = seg.launch_begin, seg.launch_end
    slack = seg.slack_ns
    out = np.zeros((n_out, 6), np.int64)
    over = np.zeros(n_out, np.int64)
    nq, nd, ns, no, nla = len(qa), len(db), len(sb), len(ob), len(lb)
    big = 2 ** 62
    i = j = jo = jl = 0   # data, sync, sync-only, launch segments beginning ≤ g0
    t_prev = -big
    lo = hi = 0           # device gaps ending ≤ q0, beginning < q1
    d_prev, q_prev = -1, -big
    for x in range(len(k)):
        r = k[x]
        g0, g1 = gb[r], ge[r]
        q0 = max(qa[x if nq > 1 else 0], g0)
        q1 = max(min(qb[x if nq > 1 else 0], g1), q0)
        if q1 <= q0:
            continue
        if g0 < t_prev:  # back in time (the next stream's gaps): afresh
            i = np.searchsorted(db, g0, side="right")
            j = np.searchsorted(sb, g0, side="right")
            jo = np.searchsorted(ob, g0, side="right")
            jl = np.searchsorted(lb, g0, side="right")
        else:
            while i < nd and db[i] <= g0:
                i += 1
            while j < ns and sb[j] <= g0:
                j += 1
            while jo < no and ob[jo] <= g0:
                jo += 1
            while jl < nla and lb[jl] <= g0:
                jl += 1
        t_prev = g0
        d = dev[gg[r]]
        s, e = dgs[d], dgs[d + 1]
        if d != d_prev or q0 < q_prev:
            lo = s + np.searchsorted(dge[s:e], q0, side="right")
            hi = s + np.searchsorted(dgb[s:e], q1, side="left")
        else:
            while lo < e and dge[lo] <= q0:
                lo += 1
            while hi < e and dgb[hi] < q1:
                hi += 1
        d_prev, q_prev = d, q0
        launch, nxt, aft, lk = nl[r], gnext[r] != NONE, after[r], lam[gg[r]]
        unknown = nxt and launch == NONE  # rule 1
        # rules 2 and 3 as in ``attribution.gap_amounts_nb`` (written out: see
        # ``attribution._attribute_nb``)
        h = g1 if not nxt else (g0 if launch <= g0 else min(launch + max(lk, 0), g1))
        near = aft or (j > 0 and g0 <= se[j - 1] + slack)
        in_data = i > 0 and g0 < de[i - 1]
        nxt_d = db[i] if i < nd else big
        cut = min(nxt_d, h, sync_budget_nb(g0, launch, j, jl, seg)) \
            if near and not in_data else g0
        nxt_o = ob[jo] if jo < no else big
        # 0: all launch (rule 6), 1: host (8) but the latency (7), 2: gap_amounts_nb
        mode = 0
        if h > cut:
            if in_data or h > nxt_d or (jo > 0 and g0 < oe[jo - 1]) or h > nxt_o:
                mode = 2
            else:
                cl = jl
                while cl < nla and lb[cl] <= cut:
                    cl += 1
                if cl > 0 and h <= le[cl - 1]:
                    mode = 0
                elif (cl == 0 or cut >= le[cl - 1]) and (cl == nla or lb[cl] >= h):
                    mode = 1
                else:
                    mode = 2
        o = row[x]
        total = 0
        for p in range(lo, max(hi, lo)):
            pa, pb = max(dgb[p], q0), min(dge[p], q1)
            a0 = a1 = a2 = a3 = a4 = a5 = 0
            if unknown:  # rule 1
                a5 = pb - pa
            elif mode == 2:
                a0, a1, a2, a3, a4, a5 = gap_amounts_nb(
                    g0, g1, launch, nxt, aft, lk, pa, pb, i, j, jo, jl, seg)
            else:
                hb = min(pb, h)
                a1 = max(min(cut, hb) - pa, 0)  # rule 3
                ra = max(pa, cut)
                rb = max(hb, ra)
                a4 = max(pb - max(pa, h), 0)  # rule 2
                if mode == 0:
                    a2 = rb - ra
                elif rb > ra:
                    t = max(ra, launch) if nxt else rb
                    a2 = rb - t if t < rb else 0
                    a3 = rb - ra - a2
            out[o, 0] += a0
            out[o, 1] += a1
            out[o, 2] += a2
            out[o, 3] += a3
            out[o, 4] += a4
            out[o, 5] += a5
            total += a0 + a1 + a2 + a3 + a4 + a5
        over[o] += (q1 - q0) - total
    return out, over
