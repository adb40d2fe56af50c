"""The GPU side of a Timeline as lanes: its rows grouped by stream and by
device, each group's busy intervals and idle gaps (with causes, see
``gaps.py``), and measures over any window: busy and idle time, idle time by
cause, CPU lead and queue depth.

A *window* is a host-clock range [w0, w1) in ns; "the whole trace" is
[``Timeline.start_ns``, ``Timeline.end_ns``], over which the gaps of every
group and its busy intervals tile the time exactly, so busy + idle = the
window's length and the idle time by cause sums to the idle time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import intervals as iv
from .gaps import Cause, HostActivity, classify
from .timeline import NONE, Timeline

__all__ = ["Group", "Lanes", "lanes", "busy_in", "idle_in", "queue_in",
           "queue_quantiles"]


@dataclass
class Group:
    """One grouping of the gpu rows (by stream or by device)."""
    n: int                 # number of groups
    of_row: np.ndarray     # group id of each gpu row
    order: np.ndarray      # rows grouped, sorted by begin
    starts: np.ndarray     # group g's rows: order[starts[g]:starts[g+1]]
    ib: np.ndarray         # merged busy intervals, grouped and sorted
    ie: np.ndarray
    istart: np.ndarray     # group g's intervals: istart[g]:istart[g+1]
    gb: np.ndarray         # gaps, grouped and sorted
    ge: np.ndarray
    gnext: np.ndarray      # row ending each gap (NONE: tail)
    gstart: np.ndarray     # group g's gaps: gstart[g]:gstart[g+1]
    lam: np.ndarray        # smallest launch latency per group (ns, ≥ 0)
    gg: np.ndarray         # group of each gap
    nl: np.ndarray         # launch time of the row ending each gap
    amounts: np.ndarray    # (gaps, 5) ns by Cause
    qt: np.ndarray         # queue depth step function: times ...
    qd: np.ndarray         # ... depth from each time on
    qstart: np.ndarray     # group g's steps: qstart[g]:qstart[g+1]


@dataclass
class Lanes:
    begin: np.ndarray      # gpu rows, end clamped to ≥ begin
    end: np.ndarray
    launch: np.ndarray
    lead: np.ndarray       # begin − launch (NONE where launch is unknown)
    streams: Group
    devices: Group
    stream_keys: np.ndarray   # (device, stream) of each stream group
    device_keys: np.ndarray   # device of each device group
    stream_device: np.ndarray  # device group of each stream group
    lo: int
    hi: int


def lanes(tl: Timeline, act: HostActivity, engine: str = "numba") -> Lanes:
    """Group a Timeline's (aligned) gpu rows; compute gaps and causes."""
    g = tl.gpu
    begin = np.asarray(g.begin_ns, np.int64)
    end = np.maximum(np.asarray(g.end_ns, np.int64), begin)
    launch = np.asarray(g.launch_ns, np.int64)
    lead = np.where(launch != NONE, begin - launch, NONE)
    lo, hi = tl.start_ns, tl.end_ns
    dev, dev_keys = iv.dense_ids(g.device, engine)
    sid, s_keys = iv.dense_ids(g.stream, engine)
    pair, pair_keys = iv.dense_ids(dev * max(len(s_keys), 1) + sid, engine)
    stream_dev = pair_keys // max(len(s_keys), 1)
    stream_keys = np.stack([dev_keys[stream_dev], s_keys[pair_keys % max(len(s_keys), 1)]],
                           axis=1) if len(pair_keys) else np.zeros((0, 2), np.int64)
    streams = _group(pair, len(pair_keys), begin, end, launch, lo, hi, act, engine)
    if len(pair_keys) == len(dev_keys):  # one stream per device: same lanes
        devices = streams
    else:
        devices = _group(dev, len(dev_keys), begin, end, launch, lo, hi, act,
                         engine)
    return Lanes(begin, end, launch, lead, streams, devices, stream_keys,
                 dev_keys, stream_dev, lo, hi)


def _group(of_row, n, begin, end, launch, lo, hi, act, engine) -> Group:
    order, starts = iv.group_order(of_row, begin, n, engine)
    ig, ib, ie, _, gg, gb, ge, gnext, lam = iv.merge(
        begin, end, launch, order, starts, lo, hi, engine)
    nl = np.where(gnext != NONE, launch[np.maximum(gnext, 0)], NONE)
    amounts = classify(gb, ge, nl, gnext != NONE, lam[gg], act, engine=engine)
    known = launch[order] != NONE
    q_order = order[known]
    q_starts = np.searchsorted(np.flatnonzero(known), starts).astype(np.int64)
    qt, qd = iv.queue_series(launch, end, q_order, q_starts, engine)
    return Group(n, of_row, order, starts, ib, ie, _starts(ig, n), gb, ge,
                 gnext, _starts(gg, n), np.maximum(lam, 0), gg, nl, amounts,
                 qt, qd, 2 * q_starts)


def _starts(group_sorted: np.ndarray, n: int) -> np.ndarray:
    return np.searchsorted(group_sorted, np.arange(n + 1)).astype(np.int64)


def _windows(w0, w1) -> tuple[np.ndarray, np.ndarray]:
    w0 = np.atleast_1d(np.asarray(w0, np.int64))
    w1 = np.atleast_1d(np.asarray(w1, np.int64))
    return w0, np.maximum(w1, w0)


def busy_in(grp: Group, w0, w1, engine: str = "numba") -> np.ndarray:
    """(groups, windows) busy ns: time covered by each group's work."""
    w0, w1 = _windows(w0, w1)
    out = np.zeros((grp.n, len(w0)), np.int64)
    for k in range(grp.n):
        s, e = grp.istart[k], grp.istart[k + 1]
        if e > s:
            out[k] = iv.coverage(grp.ib[s:e], grp.ie[s:e], w0, w1, engine)
    return out


def idle_in(grp: Group, w0, w1, act: HostActivity,
            engine: str = "numba") -> np.ndarray:
    """(groups, windows, 5) idle ns by Cause: the gaps clipped to each
    window, the causes those of the whole gap (see ``gaps.classify``)."""
    w0, w1 = _windows(w0, w1)
    out = np.zeros((grp.n, len(w0), len(Cause)), np.int64)
    for k in range(grp.n):
        s, e = grp.gstart[k], grp.gstart[k + 1]
        if e == s:
            continue
        gb, ge = grp.gb[s:e], grp.ge[s:e]
        before = np.zeros((e - s + 1, len(Cause)), np.int64)
        np.cumsum(grp.amounts[s:e], axis=0, out=before[1:])
        a = np.searchsorted(ge, w0, side="right")  # first gap ending after w0
        b = np.searchsorted(gb, w1, side="left")   # gaps beginning before w1
        b = np.maximum(a, b)
        out[k] = before[b] - before[a]
        # the first and the last gap may stick out of the window: replace
        # their amounts by those of the part inside
        for j, distinct in ((a, True), (b - 1, b - 1 > a)):
            jj = np.minimum(j, e - s - 1)
            cut = (b > a) & distinct & ((gb[jj] < w0) | (ge[jj] > w1))
            w = np.flatnonzero(cut)
            if len(w) == 0:
                continue
            r = s + jj[w]
            out[k, w] -= grp.amounts[r]
            out[k, w] += classify(grp.gb[r], grp.ge[r], grp.nl[r],
                                  grp.gnext[r] != NONE, grp.lam[grp.gg[r]],
                                  act, w0[w], w1[w], engine)
    return out


def queue_in(grp: Group, w0, w1) -> dict[str, np.ndarray]:
    """Queue depth per (group, window), time-weighted over the window:
    ``mean``, ``min``, ``max``; depth counts work launched and not yet
    finished (it includes the work running)."""
    w0, w1 = _windows(w0, w1)
    shape = (grp.n, len(w0))
    mean, lo, hi = np.zeros(shape), np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    for k in range(grp.n):
        s, e = grp.qstart[k], grp.qstart[k + 1]
        t, d = grp.qt[s:e], grp.qd[s:e]
        if e == s:
            continue
        area = np.zeros(len(t) + 1, np.float64)
        np.cumsum(d[:-1] * np.diff(t).astype(np.float64), out=area[2:])

        def integral(x):
            i = np.searchsorted(t, x, side="right")  # steps at or before x
            j = np.maximum(i - 1, 0)
            return np.where(i > 0, area[i] + d[j] * (x - t[j]), 0.0)

        span = np.maximum(w1 - w0, 1)
        mean[k] = (integral(w1) - integral(w0)) / span
        # depth just before each window, then every step inside it
        i0 = np.searchsorted(t, w0, side="right")
        i1 = np.searchsorted(t, w1, side="left")
        at0 = np.where(i0 > 0, d[np.maximum(i0 - 1, 0)], 0)
        for w in range(len(w0)):
            inside = d[i0[w]:i1[w]]
            lo[k, w] = min(at0[w], inside.min()) if len(inside) else at0[w]
            hi[k, w] = max(at0[w], inside.max()) if len(inside) else at0[w]
    return {"mean": mean, "min": lo, "max": hi}


def queue_quantiles(grp: Group, lo: int, hi: int, qs) -> np.ndarray:
    """(groups, len(qs)) time-weighted quantiles of the queue depth over
    [lo, hi): the smallest depth held for at least that share of the time."""
    out = np.zeros((grp.n, len(qs)))
    for k in range(grp.n):
        s, e = grp.qstart[k], grp.qstart[k + 1]
        t, d = grp.qt[s:e], grp.qd[s:e]
        # the depth is 0 before the first step and after the last
        edges = np.clip(np.concatenate([[lo], t, [hi]]), lo, hi)
        depth = np.maximum(np.concatenate([[0], d]), 0)  # alignment error can dip below 0
        dur = np.diff(edges)
        if dur.sum() <= 0:
            continue
        hist = np.bincount(depth, weights=dur)
        cum = np.cumsum(hist) / dur.sum()
        out[k] = np.searchsorted(cum, np.asarray(qs) - 1e-12)
    return out
