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
"""

from __future__ import annotations

import numpy as np

from ..timeline.schema import NONE
from .gaps import HostActivity, classify
from .lanes import Lanes

__all__ = ["device_idle_amounts", "stream_window"]


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
    rep = np.repeat(np.arange(n), cnt)
    piece = np.repeat(lo - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
    pa = np.maximum(dv.gb[piece], qa[rep])
    pb = np.minimum(dv.ge[piece], qb[rep])
    am = classify(*(x[rep] for x in args), act, pa, pb, engine,
                  after_sync=st.after[k][rep])
    out = _sums(am, cnt)
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
    sel = np.flatnonzero((st.ge > w0) & (st.gb < w1))
    am, ov = device_idle_amounts(ln, act, sel, np.full(len(sel), w0),
                                 np.full(len(sel), w1), engine)
    cnt = np.bincount(st.gg[sel], minlength=st.n)  # gaps come grouped by stream
    return _sums(am, cnt), _sums(ov, cnt)
