"""The queue-depth model: work launched and not yet finished.

A gpu row is in its queue from its launch (``launch_ns``) until it ends
(its ``end_ns``, taken as no earlier than its begin); a row whose launch
time is unknown (NONE) is not counted, since when it entered the queue is
not known (HolisticTraceAnalysis counts only work with a launch, too).
``queue_series`` is that model as a step function per group of rows;
``Report.queue_depth`` (``cutimeline.analysis.idle.lanes``) and the Chrome
export's Perfetto counter (``cutimeline.formats.chrome``, through
``stream_depths``) both read it, so they agree on every Timeline. Numba
kernels, NumPy twins.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..timeline.schema import NONE
from .engines import as_i64, empty_i64
from .ids import pair_ids

__all__ = ["queue_series", "stream_depths", "held_points", "ascending_nb",
           "merge_counts_nb"]


@njit(cache=True)
def ascending_nb(x):
    """``x`` in non-decreasing order: itself when it is already."""
    for i in range(1, len(x)):
        if x[i] < x[i - 1]:
            return np.sort(x)
    return x


@njit(cache=True)
def merge_counts_nb(p, m):
    """For sorted p and m: how many m come before each p (m < p: at equal
    times the +1 goes first) and how many p before each m (p ≤ m)."""
    before_p, before_m = empty_i64(len(p)), empty_i64(len(m))
    j = 0
    for i in range(len(p)):  # pointer walks: no data-dependent branch per event
        while j < len(m) and m[j] < p[i]:
            j += 1
        before_p[i] = j
    i = 0
    for j in range(len(m)):
        while i < len(p) and p[i] <= m[j]:
            i += 1
        before_m[j] = i
    return before_p, before_m


@njit(cache=True)
def _queue_nb(plus, minus, order, starts):
    n = len(order)
    t, q = empty_i64(2 * n), empty_i64(2 * n)
    for g in range(len(starts) - 1):
        s, e = starts[g], starts[g + 1]
        p = ascending_nb(plus[order[s:e]])
        m = ascending_nb(minus[order[s:e]])
        bp, bm = merge_counts_nb(p, m)
        for i in range(e - s):  # each event's place in the merged sequence
            k = 2 * s + i + bp[i]
            t[k], q[k] = p[i], i + 1 - bp[i]
        for j in range(e - s):
            k = 2 * s + j + bm[j]
            t[k], q[k] = m[j], bm[j] - j - 1
    return t, q


def _queue_np(plus, minus, order, starts):
    G = len(starts) - 1
    grp = np.repeat(np.arange(G, dtype=np.int64), np.diff(starts))
    t = np.concatenate([plus[order], minus[order]])
    kind = np.repeat(np.array([0, 1], np.int64), len(order))
    o = np.lexsort((kind, t, np.concatenate([grp, grp])))
    # each group adds and removes each row once, so one running sum serves
    return t[o], np.cumsum(1 - 2 * kind[o])


def queue_series(plus, minus, order, starts, engine: str = "numba"):
    """Each group's queue depth as a step function: (t, depth) with depth
    the value from t on, 2 entries per row (+1 at ``plus``, −1 at
    ``minus``), group g at ``2*starts[g]:2*starts[g+1]``, time-sorted, and
    at equal times the +1 first (as HTA, which lists launches before
    kernels)."""
    args = (as_i64(plus), as_i64(minus), as_i64(order), as_i64(starts))
    return (_queue_nb if engine == "numba" else _queue_np)(*args)


def held_points(t: np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """Which entries of a time-sorted step function hold for some time (a
    mask): at each time, within each ``group``, the last. Kept, they are
    the same function with one point per time, a counter track's form."""
    if len(t) == 0:
        return np.zeros(0, bool)
    change = t[1:] != t[:-1]
    if group is not None:
        change |= group[1:] != group[:-1]
    return np.append(change, True)


def stream_depths(device, stream, launch, begin, end, engine: str = "numba"):
    """The queue depth of every (device, stream) of some gpu rows (columns
    ``device``, ``stream``, ``launch_ns``, ``begin_ns``, ``end_ns``), as
    columns (device, stream, time ns, depth) sorted by device, stream and
    time, one point per time (``held_points``): the depth from it on."""
    launch = as_i64(launch)
    known = np.flatnonzero(launch != NONE)
    end = np.maximum(as_i64(end), as_i64(begin))[known]
    pair, k_dev, k_st = pair_ids(as_i64(device)[known], as_i64(stream)[known], engine)
    order = np.argsort(pair, kind="stable")
    starts = np.searchsorted(pair[order], np.arange(len(k_dev) + 1))
    t, depth = queue_series(launch[known], end, order, starts, engine)
    group = np.repeat(np.arange(len(k_dev), dtype=np.int64), 2 * np.diff(starts))
    keep = held_points(t, group)
    return (np.asarray(k_dev, np.int64)[group][keep], np.asarray(k_st, np.int64)[group][keep],
            t[keep], depth[keep])
